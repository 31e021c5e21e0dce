// y += a * x from C++: rig's C ABI with RAII handles (std::unique_ptr and the library's
// free functions) and exceptions carrying rig's message. The kernel is HIP, built from
// source; its parameters are set by position (HIP's metadata names none).
// Usage: vadd_cpp [SOCKET]. Build (docs/kernels.md): c++ -std=c++17 vadd.cpp -I rig-capi/include
//     -L target/debug -lrig -Wl,-rpath,$PWD/target/debug
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rig_capi.h"

namespace {

void check(RigStatus s, const char *what) {
  if (s != RIG_STATUS_OK)
    throw std::runtime_error(std::string(what) + ": " + rig_last_error());
}

template <typename T, void (*Free)(T *)> struct Deleter {
  void operator()(T *p) const { Free(p); }
};
template <typename T, void (*Free)(T *)> using Handle = std::unique_ptr<T, Deleter<T, Free>>;

using Connection = Handle<RigConnection, rig_connection_free>;
using Device = Handle<RigDevice, rig_device_free>;
using Buffer = Handle<RigBuffer, rig_buffer_free>;
using Image = Handle<RigImage, rig_image_free>;
using Kernel = Handle<RigKernel, rig_kernel_free>;
using Args = Handle<RigArgs, rig_args_free>;
using Submission = Handle<RigSubmission, rig_submission_free>;
using Point = Handle<RigPoint, rig_point_free>;
using Code = Handle<RigCode, rig_code_free>;

const char *AXPY = R"(
extern "C" __global__ void axpy(float a, const float *x, float *y) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] += a * x[i];
}
)";

}  // namespace

int main(int argc, char **argv) try {
  RigConnection *r;
  check(rig_connect(argc > 1 ? argv[1] : nullptr, &r), "connect");
  Connection rig(r);
  RigDevice *d;
  check(rig_open(rig.get(), "0", &d), "open");
  Device dev(d);

  RigCode *c;
  check(rig_compile(RIG_LANGUAGE_HIP, AXPY, rig_device_arch(dev.get()), &c), "compile");
  Code code(c);
  RigImage *i;
  check(rig_image_load(dev.get(), rig_code_data(code.get()), rig_code_len(code.get()), &i), "load");
  Image image(i);
  RigKernel *k;
  check(rig_kernel_resolve(image.get(), "axpy", &k), "resolve");
  Kernel axpy(k);

  const size_t n = 512;
  std::vector<float> xs(n), ys(n, 1.0f);
  for (size_t j = 0; j < n; j++) xs[j] = float(j);
  RigBuffer *b;
  check(rig_buffer_create(dev.get(), n * sizeof(float), RIG_MEMORY_PINNED, &b), "buffer");
  Buffer x(b);
  check(rig_buffer_create(dev.get(), n * sizeof(float), RIG_MEMORY_DEVICE, &b), "buffer");
  Buffer y(b);
  check(rig_buffer_write(x.get(), 0, reinterpret_cast<const uint8_t *>(xs.data()), n * 4), "write");
  check(rig_buffer_write(y.get(), 0, reinterpret_cast<const uint8_t *>(ys.data()), n * 4), "write");

  RigArgs *a;
  check(rig_args_new(axpy.get(), &a), "args");
  Args args(a);
  float factor = 3.0f;
  check(rig_args_value(args.get(), nullptr, 0, reinterpret_cast<const uint8_t *>(&factor), 4), "a");
  check(rig_args_buffer(args.get(), nullptr, 1, x.get(), 0, true), "x");
  check(rig_args_buffer(args.get(), nullptr, 2, y.get(), 0, false), "y");
  // An unset or misplaced argument is an exception with rig's message.
  try {
    check(rig_args_buffer(args.get(), nullptr, 0, x.get(), 0, true), "a buffer for a float");
    return 1;
  } catch (const std::runtime_error &e) {
    std::printf("refused: %s\n", e.what());
  }

  Submission s(rig_submission_new());
  const uint32_t groups[3] = {n / 64, 1, 1}, threads[3] = {64, 1, 1};
  check(rig_submission_launch(s.get(), args.get(), groups, threads), "launch");
  RigPoint *p;
  check(rig_submit(dev.get(), s.get(), &p), "submit");
  Point point(p);
  check(rig_point_wait(point.get()), "wait");
  check(rig_buffer_read(y.get(), 0, reinterpret_cast<uint8_t *>(ys.data()), n * 4), "read");
  for (size_t j = 0; j < n; j++)
    if (ys[j] != 1.0f + 3.0f * float(j)) {
      std::fprintf(stderr, "y[%zu] = %f\n", j, ys[j]);
      return 1;
    }
  std::printf("y[10] = %g\nok\n", ys[10]);
  return 0;
} catch (const std::exception &e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
