// A stand-in for the NVIDIA driver's libcuda.so.1 in cuda_driver_hold_test:
// cuInit returns FAKE_CUINIT_RESULT (0 = CUDA_SUCCESS, 100 =
// CUDA_ERROR_NO_DEVICE) and counts its calls.
namespace {
int calls = 0;
}  // namespace

extern "C" int cuInit(unsigned int /*flags*/) {
  ++calls;
  return FAKE_CUINIT_RESULT;
}

extern "C" int fake_cuinit_calls() { return calls; }
