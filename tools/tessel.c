/* tessel.c — the `tessel` command-line tool: command dispatch and usage.
 * Commands live in their own files (train.c); flag parsing in args.c. */
#include <stdio.h>
#include <string.h>

#include "args.h"  // exit codes
#include "train.h" // cli_train
#include "tessel/tessel.h"

int ts_cmd_sharding(int argc, char **argv); // cmd_sharding.c
int ts_cmd_inspect(int argc, char **argv);  // cmd_inspect.c
int ts_cmd_plan(int argc, char **argv);     // cmd_plan.c
int ts_cmd_plot(int argc, char **argv);     // cmd_plot.c
int ts_cmd_ckpt(int argc, char **argv);     // cmd_ckpt.c

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessel <command> [flags]\n"
          "\n"
          "commands:\n"
          "  train     train a model (mlp, cnn) on Fashion-MNIST\n"
          "  sharding  print the OpSharding of a partition spec on a device mesh\n"
          "  inspect   show the compiled training step: shardings, collectives, memory\n"
          "  plan      predict a step on a mesh of any size (cost model, no execution)\n"
          "  plot      draw training curves from --log-json logs (PNG, SVG, PDF)\n"
          "  ckpt      inspect a checkpoint, export it as safetensors\n"
          "  version   print the version\n"
          "\n"
          "Run 'tessel <command> --help' for the flags of a command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("tessel %s\n", TS_VERSION_STRING);
    return CLI_EXIT_OK;
  }
  if (strcmp(cmd, "train") == 0) return cli_train(argc - 1, argv + 1);
  if (strcmp(cmd, "sharding") == 0) return ts_cmd_sharding(argc - 1, argv + 1);
  if (strcmp(cmd, "inspect") == 0) return ts_cmd_inspect(argc - 1, argv + 1);
  if (strcmp(cmd, "plan") == 0) return ts_cmd_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "plot") == 0) return ts_cmd_plot(argc - 1, argv + 1);
  if (strcmp(cmd, "ckpt") == 0) return ts_cmd_ckpt(argc - 1, argv + 1);
  cli_error(NULL, "unknown command '%s' (valid: train, sharding, inspect, plan, plot, ckpt, version)", cmd);
  usage(stderr);
  return CLI_EXIT_USAGE;
}
