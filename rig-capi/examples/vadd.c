/* y += a * x on a rig device, from C: the kernel built from OpenCL C source, its
 * arguments set by name, the result read back; host memory shared with no copy; a fill, a
 * copy and a profile. Usage: vadd [SOCKET] (default: RIG_SOCKET, else rigd's socket).
 * Build: cc vadd.c -I rig-capi/include -L target/debug -lrig -o vadd */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rig_capi.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    RigStatus s_ = (call);                                                           \
    if (s_ != RIG_STATUS_OK) {                                                       \
      fprintf(stderr, "%s failed (%d): %s\n", #call, (int)s_, rig_last_error());     \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static const char *VADD =
    "kernel void vadd(global const float *x, global float *y, float a) {\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] += a * x[i];\n"
    "}\n";

enum { N = 1024 };

int main(int argc, char **argv) {
  RigConnection *rig;
  CHECK(rig_connect(argc > 1 ? argv[1] : NULL, &rig));
  RigDevice *dev;
  CHECK(rig_open(rig, "0", &dev));
  printf("device %llu: %s (%s)\n", (unsigned long long)rig_device_id(dev), rig_device_name(dev),
         rig_device_arch(dev));

  RigCode *code;
  CHECK(rig_compile(RIG_LANGUAGE_OPENCL, VADD, rig_device_arch(dev), &code));
  RigImage *image;
  CHECK(rig_image_load(dev, rig_code_data(code), rig_code_len(code), &image));
  rig_code_free(code);
  RigKernel *vadd;
  CHECK(rig_kernel_resolve(image, "vadd", &vadd));
  for (size_t i = 0; i < rig_kernel_param_count(vadd); i++) {
    RigParam p;
    CHECK(rig_kernel_param(vadd, i, &p));
    printf("param %zu: %s kind %d offset %u size %u\n", i, p.name ? p.name : "?", (int)p.kind,
           p.offset, p.size);
  }

  /* x in host memory the program writes in place; y in Pinned memory through calls. */
  RigBuffer *x, *y;
  float *xs;
  CHECK(rig_host_buffer(dev, N * sizeof(float), &x, (uint8_t **)&xs));
  for (int i = 0; i < N; i++) xs[i] = (float)i;
  CHECK(rig_buffer_create(dev, N * sizeof(float), RIG_MEMORY_PINNED, &y));
  static float ys[N];
  for (int i = 0; i < N; i++) ys[i] = 1.0f;
  CHECK(rig_buffer_write(y, 0, (const uint8_t *)ys, sizeof ys));

  RigArgs *args;
  CHECK(rig_args_new(vadd, &args));
  CHECK(rig_args_buffer(args, "x", 0, x, 0, true));
  CHECK(rig_args_buffer(args, "y", 0, y, 0, false));
  double wrong = 2.0;
  if (rig_args_value(args, "a", 0, (const uint8_t *)&wrong, sizeof wrong) != RIG_STATUS_ARG) {
    fprintf(stderr, "a double for a float was not refused\n");
    return 1;
  }
  printf("refused: %s\n", rig_last_error());
  float a = 2.0f;
  CHECK(rig_args_value(args, NULL, 2, (const uint8_t *)&a, sizeof a)); /* by position */

  uint32_t groups[3] = {N / 256, 1, 1}, threads[3] = {256, 1, 1};
  CHECK(rig_profile_begin(dev));
  RigSubmission *s = rig_submission_new();
  CHECK(rig_submission_launch(s, args, groups, threads));
  RigPoint *point;
  CHECK(rig_submit(dev, s, &point));
  CHECK(rig_point_wait(point));
  CHECK(rig_buffer_read(y, 0, (uint8_t *)ys, sizeof ys));
  for (int i = 0; i < N; i++) {
    if (ys[i] != 1.0f + 2.0f * (float)i) {
      fprintf(stderr, "y[%d] = %f\n", i, ys[i]);
      return 1;
    }
  }
  printf("y[10] = %g\n", ys[10]);

  /* A fill and a copy on COPY:0, after the launch's point. */
  RigBuffer *z;
  CHECK(rig_buffer_create(dev, N * sizeof(float), RIG_MEMORY_PINNED, &z));
  RigSubmission *c = rig_submission_new();
  CHECK(rig_submission_wait(c, point));
  CHECK(rig_submission_fill(c, z, 0, N * sizeof(float), 0));
  CHECK(rig_submission_copy(c, y, 0, z, 0, 16 * sizeof(float)));
  RigPoint *copied;
  CHECK(rig_submit(dev, c, &copied));
  CHECK(rig_point_wait(copied));
  float zs[32];
  CHECK(rig_buffer_read(z, 0, (uint8_t *)zs, sizeof zs));
  if (zs[15] != ys[15] || zs[16] != 0.0f) {
    fprintf(stderr, "copy: z[15] = %f, z[16] = %f\n", zs[15], zs[16]);
    return 1;
  }

  RigProfile *profile;
  CHECK(rig_profile_end(dev, &profile));
  char *trace;
  CHECK(rig_profile_chrome_trace(profile, &trace));
  printf("profile: %zu values, trace of %zu bytes\n", rig_profile_len(profile), strlen(trace));
  if (rig_profile_len(profile) < 2 || strstr(trace, "traceEvents") == NULL) return 1;
  rig_string_free(trace);
  rig_profile_free(profile);

  rig_point_free(copied);
  rig_submission_free(c);
  rig_point_free(point);
  rig_submission_free(s);
  rig_args_free(args);
  rig_buffer_free(z);
  rig_buffer_free(y);
  rig_buffer_free(x);
  rig_kernel_free(vadd);
  rig_image_free(image);
  CHECK(rig_device_close(dev));
  rig_connection_free(rig);
  printf("ok\n");
  return 0;
}
