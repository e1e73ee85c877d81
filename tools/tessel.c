/* tessel.c — the command-line tool (placeholder until the train command lands). */
#include <stdio.h>

int main(void) {
  fprintf(stderr, "tessel: no commands yet\n");
  return 2;
}
