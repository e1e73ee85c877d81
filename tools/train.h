/* train.h — the `tessel train` command. */
#ifndef TESSEL_TOOLS_TRAIN_H
#define TESSEL_TOOLS_TRAIN_H

#include <stdio.h> // FILE

/* argv[0] is "train"; returns the process exit code (0, 1 failure, 2 usage). */
int cli_train(int argc, char **argv);
void cli_train_usage(FILE *f);

#endif
