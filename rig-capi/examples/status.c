/* What a failed call says, from C: each status is its own number, named by
 * rig_status_string, with the whole message in rig_last_error. Usage: status SOCKET, with
 * rigd serving SOCKET; once it prints "opened", stop rigd and write a line to its stdin.
 * Build: cc status.c -I rig-capi/include -L target/debug -lrig -o status */
#include <stdio.h>
#include <string.h>

#include "rig_capi.h"

static int expect(const char *what, RigStatus got, RigStatus want) {
  printf("%s: %s (%d): %s\n", what, rig_status_string(got), (int)got, rig_last_error());
  if (got != want) {
    fprintf(stderr, "%s: expected %s (%d)\n", what, rig_status_string(want), (int)want);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: status SOCKET\n");
    return 2;
  }
  /* No rigd listens on this socket. */
  char absent[4096];
  snprintf(absent, sizeof absent, "%s.absent", argv[1]);
  RigConnection *none = NULL;
  if (expect("no rigd", rig_connect(absent, &none), RIG_STATUS_CONNECT)) return 1;

  RigConnection *rig;
  RigStatus s = rig_connect(argv[1], &rig);
  if (expect("connect", s, RIG_STATUS_OK)) return 1;
  RigDevice *dev;
  if (expect("open", rig_open(rig, "0", &dev), RIG_STATUS_OK)) return 1;
  printf("opened\n");
  fflush(stdout);

  /* rigd stops while the connection holds a device: the next call finds it gone. */
  char line[16];
  if (!fgets(line, sizeof line, stdin)) return 1;
  RigDevice *again = NULL;
  if (expect("rigd went away", rig_open(rig, "0", &again), RIG_STATUS_CONNECTION)) return 1;

  if (strcmp(rig_status_string(-1), "not a RigStatus") != 0) return 1;
  rig_device_free(dev);
  rig_connection_free(rig);
  printf("ok\n");
  return 0;
}
