#include "worker/hw/nvml_gpu_inventory.h"

#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace trainctl::worker {
namespace {

// The slice of NVML's C ABI we use, declared here because hosts without the
// CUDA toolkit have no nvml.h. Types and values are those of nvml.h; see the
// NVML API reference, https://docs.nvidia.com/deploy/nvml-api/ ("Device
// Queries", "NvLink Methods", "Initialization and Cleanup", "Error reporting").
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

// nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it
// (nvmlProcessInfo_v2_t in nvml.h); usedGpuMemory is bytes, or
// NVML_VALUE_NOT_AVAILABLE.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t ABI");
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ULL;

// nvmlProcessUtilizationSample_t: percent of the sample period; timeStamp in
// microseconds (CPU clock).
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32,
              "nvmlProcessUtilizationSample_t ABI");

// nvmlMemory_t: bytes.
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlMemory_v2_t: bytes; `used` excludes the driver's `reserved` memory, as
// nvidia-smi reports it (v1's `used` includes it).
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2).
constexpr unsigned int kMemoryV2Version =
    static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2u << 24);

// nvmlUtilization_t: percent of the last sample period.
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2 (NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE =
// 16, NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32).
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t ABI");

using nvmlEnableState_t = int;  // NVML_FEATURE_DISABLED = 0, _ENABLED = 1.
constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;
constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;
constexpr int NVML_TEMPERATURE_GPU = 0;  // nvmlTemperatureSensors_t.
constexpr unsigned int NVML_NVLINK_MAX_LINKS = 18;
// nvmlIntNvLinkDeviceType_t.
constexpr int NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02;
// NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE.
constexpr unsigned int kNameBufferSize = 96;
constexpr unsigned int kUuidBufferSize = 96;

constexpr const char* kLibraryName = "libnvidia-ml.so.1";

// GPM (nvml.h "GPM Structs", NVML 12.x and 13.x). nvmlGpmSample_t is an
// opaque handle. nvmlGpmMetricsGet_t ends in an array of
// NVML_GPM_METRIC_MAX metrics; that constant grew between releases (98,
// 210, 333), while the driver reads only `numMetrics` entries, so the
// array here is the largest size and we ask for three.
struct nvmlGpmSample_st;
using nvmlGpmSample_t = nvmlGpmSample_st*;
struct nvmlGpmMetric_t {
  unsigned int metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;
};
static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t ABI");
constexpr unsigned int kGpmMetricMax = 333;
struct nvmlGpmMetricsGet_t {
  unsigned int version;
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[kGpmMetricMax];
};
constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;
struct nvmlGpmSupport_t {
  unsigned int version;
  unsigned int isSupportedDevice;
};
constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;
// nvmlGpmMetricId_t values.
constexpr unsigned int NVML_GPM_METRIC_SM_UTIL = 2;
constexpr unsigned int NVML_GPM_METRIC_SM_OCCUPANCY = 3;
constexpr unsigned int NVML_GPM_METRIC_DRAM_BW_UTIL = 10;

}  // namespace

struct NvmlGpuInventory::Api {
  nvmlReturn_t (*Init)();                                      // nvmlInit_v2
  nvmlReturn_t (*Shutdown)();                                  // nvmlShutdown
  const char* (*ErrorString)(nvmlReturn_t);                    // nvmlErrorString
  nvmlReturn_t (*DeviceGetCount)(unsigned int*);               // _v2
  nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int, nvmlDevice_t*);  // _v2
  nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*DeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*DeviceGetTemperature)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*DeviceGetPowerUsage)(nvmlDevice_t, unsigned int*);  // mW
  nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned int*, unsigned int*);
  nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t*);  // _v3
  nvmlReturn_t (*DeviceGetNvLinkState)(nvmlDevice_t, unsigned int,
                                       nvmlEnableState_t*);
  nvmlReturn_t (*DeviceGetNvLinkRemotePciInfo)(nvmlDevice_t, unsigned int,
                                               nvmlPciInfo_t*);  // _v2
  // Optional (newer drivers); null when absent.
  nvmlReturn_t (*DeviceGetMemoryInfoV2)(nvmlDevice_t, nvmlMemory_v2_t*);
  nvmlReturn_t (*DeviceGetNvLinkRemoteDeviceType)(nvmlDevice_t, unsigned int,
                                                  int*);
  // nvmlDeviceGetComputeRunningProcesses_v3 and
  // nvmlDeviceGetProcessUtilization (per-process accounting).
  nvmlReturn_t (*DeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned int*,
                                                   nvmlProcessInfo_t*);
  // nvmlDeviceGetMPSComputeRunningProcesses_v3: the MPS clients, which the
  // list above leaves out (it shows their MPS server).
  nvmlReturn_t (*DeviceGetMpsComputeRunningProcesses)(nvmlDevice_t, unsigned int*,
                                                      nvmlProcessInfo_t*);
  nvmlReturn_t (*DeviceGetProcessUtilization)(nvmlDevice_t,
                                              nvmlProcessUtilizationSample_t*,
                                              unsigned int*, unsigned long long);
  // GPM (Hopper and newer drivers); all four or none.
  nvmlReturn_t (*GpmQueryDeviceSupport)(nvmlDevice_t, nvmlGpmSupport_t*);
  nvmlReturn_t (*GpmSampleAlloc)(nvmlGpmSample_t*);
  nvmlReturn_t (*GpmSampleFree)(nvmlGpmSample_t);
  nvmlReturn_t (*GpmSampleGet)(nvmlDevice_t, nvmlGpmSample_t);
  nvmlReturn_t (*GpmMetricsGet)(nvmlGpmMetricsGet_t*);

  std::string Error(nvmlReturn_t r) const {
    const char* s = ErrorString != nullptr ? ErrorString(r) : nullptr;
    return s != nullptr ? std::string(s) : absl::StrFormat("NVML error %d", r);
  }
};

namespace {

using Api = NvmlGpuInventory::Api;

absl::Status NvmlError(const Api& api, const char* function, int gpu,
                       nvmlReturn_t r) {
  if (gpu < 0) {
    return absl::UnavailableError(
        absl::StrFormat("NVML %s failed: %s", function, api.Error(r)));
  }
  return absl::UnavailableError(absl::StrFormat("NVML %s failed for GPU %d: %s",
                                                function, gpu, api.Error(r)));
}

// The value is missing rather than the driver failing.
bool IsUnsupported(nvmlReturn_t r) {
  return r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NO_PERMISSION ||
         r == NVML_ERROR_FUNCTION_NOT_FOUND;
}

template <typename Fn>
absl::Status Resolve(void* library, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*fn == nullptr) {
    return absl::UnavailableError(absl::StrFormat(
        "%s has no function %s (driver too old?)", kLibraryName, symbol));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<nvmlDevice_t>> Devices(const Api& api) {
  unsigned int count = 0;
  nvmlReturn_t r = api.DeviceGetCount(&count);
  if (r != NVML_SUCCESS) return NvmlError(api, "nvmlDeviceGetCount_v2", -1, r);
  std::vector<nvmlDevice_t> devices(count);
  for (unsigned int i = 0; i < count; ++i) {
    r = api.DeviceGetHandleByIndex(i, &devices[i]);
    if (r != NVML_SUCCESS) {
      return NvmlError(api, "nvmlDeviceGetHandleByIndex_v2", i, r);
    }
  }
  return devices;
}

// Total and used memory of GPU `i` in bytes, from nvmlDeviceGetMemoryInfo_v2
// where the driver has it (used without the driver's reservation), else v1.
absl::Status QueryMemory(const Api& api, nvmlDevice_t device, int i,
                         int64_t* total, int64_t* used) {
  if (api.DeviceGetMemoryInfoV2 != nullptr) {
    nvmlMemory_v2_t memory = {};
    memory.version = kMemoryV2Version;
    const nvmlReturn_t r = api.DeviceGetMemoryInfoV2(device, &memory);
    if (r == NVML_SUCCESS) {
      *total = static_cast<int64_t>(memory.total);
      *used = static_cast<int64_t>(memory.used);
      return absl::OkStatus();
    }
    if (!IsUnsupported(r)) {
      return NvmlError(api, "nvmlDeviceGetMemoryInfo_v2", i, r);
    }
  }
  nvmlMemory_t memory = {};
  const nvmlReturn_t r = api.DeviceGetMemoryInfo(device, &memory);
  if (r != NVML_SUCCESS) return NvmlError(api, "nvmlDeviceGetMemoryInfo", i, r);
  *total = static_cast<int64_t>(memory.total);
  *used = static_cast<int64_t>(memory.used);
  return absl::OkStatus();
}

using PciAddress = std::tuple<unsigned, unsigned, unsigned>;  // domain:bus:dev

PciAddress AddressOf(const nvmlPciInfo_t& pci) {
  return {pci.domain, pci.bus, pci.device};
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlGpuInventory>> NvmlGpuInventory::Create() {
  void* library = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(absl::StrFormat(
        "cannot load %s (%s): is the NVIDIA driver installed? Use --fake-gpus "
        "on hosts without GPUs",
        kLibraryName, why != nullptr ? why : "unknown error"));
  }
  auto api = std::make_unique<Api>();
  absl::Status status;
  // Symbols with a versioned variant use it: the unversioned ones are kept
  // only for binaries built against old headers (nvml.h maps the names).
  for (absl::Status s :
       {Resolve(library, "nvmlInit_v2", &api->Init),
        Resolve(library, "nvmlShutdown", &api->Shutdown),
        Resolve(library, "nvmlErrorString", &api->ErrorString),
        Resolve(library, "nvmlDeviceGetCount_v2", &api->DeviceGetCount),
        Resolve(library, "nvmlDeviceGetHandleByIndex_v2",
                &api->DeviceGetHandleByIndex),
        Resolve(library, "nvmlDeviceGetName", &api->DeviceGetName),
        Resolve(library, "nvmlDeviceGetUUID", &api->DeviceGetUUID),
        Resolve(library, "nvmlDeviceGetMemoryInfo", &api->DeviceGetMemoryInfo),
        Resolve(library, "nvmlDeviceGetUtilizationRates",
                &api->DeviceGetUtilizationRates),
        Resolve(library, "nvmlDeviceGetTemperature", &api->DeviceGetTemperature),
        Resolve(library, "nvmlDeviceGetPowerUsage", &api->DeviceGetPowerUsage),
        Resolve(library, "nvmlDeviceGetMigMode", &api->DeviceGetMigMode),
        Resolve(library, "nvmlDeviceGetPciInfo_v3", &api->DeviceGetPciInfo),
        Resolve(library, "nvmlDeviceGetNvLinkState", &api->DeviceGetNvLinkState),
        Resolve(library, "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                &api->DeviceGetNvLinkRemotePciInfo)}) {
    if (status.ok()) status = s;
  }
  if (!status.ok()) {
    dlclose(library);
    return status;
  }
  api->DeviceGetMemoryInfoV2 =
      reinterpret_cast<decltype(api->DeviceGetMemoryInfoV2)>(
          dlsym(library, "nvmlDeviceGetMemoryInfo_v2"));
  api->DeviceGetNvLinkRemoteDeviceType =
      reinterpret_cast<decltype(api->DeviceGetNvLinkRemoteDeviceType)>(
          dlsym(library, "nvmlDeviceGetNvLinkRemoteDeviceType"));
  api->DeviceGetComputeRunningProcesses =
      reinterpret_cast<decltype(api->DeviceGetComputeRunningProcesses)>(
          dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v3"));
  api->DeviceGetProcessUtilization =
      reinterpret_cast<decltype(api->DeviceGetProcessUtilization)>(
          dlsym(library, "nvmlDeviceGetProcessUtilization"));
  api->DeviceGetMpsComputeRunningProcesses =
      reinterpret_cast<decltype(api->DeviceGetMpsComputeRunningProcesses)>(
          dlsym(library, "nvmlDeviceGetMPSComputeRunningProcesses_v3"));
  api->GpmQueryDeviceSupport =
      reinterpret_cast<decltype(api->GpmQueryDeviceSupport)>(
          dlsym(library, "nvmlGpmQueryDeviceSupport"));
  api->GpmSampleAlloc = reinterpret_cast<decltype(api->GpmSampleAlloc)>(
      dlsym(library, "nvmlGpmSampleAlloc"));
  api->GpmSampleFree = reinterpret_cast<decltype(api->GpmSampleFree)>(
      dlsym(library, "nvmlGpmSampleFree"));
  api->GpmSampleGet = reinterpret_cast<decltype(api->GpmSampleGet)>(
      dlsym(library, "nvmlGpmSampleGet"));
  api->GpmMetricsGet = reinterpret_cast<decltype(api->GpmMetricsGet)>(
      dlsym(library, "nvmlGpmMetricsGet"));
  if (api->GpmQueryDeviceSupport == nullptr || api->GpmSampleAlloc == nullptr ||
      api->GpmSampleFree == nullptr || api->GpmSampleGet == nullptr ||
      api->GpmMetricsGet == nullptr) {
    api->GpmQueryDeviceSupport = nullptr;  // GPM off as a whole.
  }
  const nvmlReturn_t r = api->Init();
  if (r != NVML_SUCCESS) {
    absl::Status error = absl::UnavailableError(absl::StrFormat(
        "NVML nvmlInit_v2 failed: %s (is the NVIDIA kernel module loaded? try "
        "nvidia-smi)",
        api->Error(r)));
    dlclose(library);
    return error;
  }
  return std::unique_ptr<NvmlGpuInventory>(
      new NvmlGpuInventory(library, std::move(api)));
}

NvmlGpuInventory::NvmlGpuInventory(void* library, std::unique_ptr<Api> api)
    : library_(library), api_(std::move(api)) {}

NvmlGpuInventory::~NvmlGpuInventory() {
  absl::MutexLock lock(&mu_);
  for (GpmState& g : gpm_) {
    for (void* sample : {g.previous, g.current}) {
      if (sample != nullptr) {
        api_->GpmSampleFree(static_cast<nvmlGpmSample_t>(sample));
      }
    }
  }
  const nvmlReturn_t r = api_->Shutdown();
  if (r != NVML_SUCCESS) {
    TC_LOG_WARN("NVML nvmlShutdown failed: {}", api_->Error(r));
  }
  dlclose(library_);
}

absl::StatusOr<std::vector<GpuInfo>> NvmlGpuInventory::ListGpus() {
  absl::MutexLock lock(&mu_);
  const Api& api = *api_;
  absl::StatusOr<std::vector<nvmlDevice_t>> devices = Devices(api);
  if (!devices.ok()) return devices.status();
  const int n = static_cast<int>(devices->size());

  std::vector<GpuInfo> gpus(n);
  std::map<PciAddress, int> index_by_pci;
  for (int i = 0; i < n; ++i) {
    nvmlDevice_t device = (*devices)[i];
    GpuInfo& gpu = gpus[i];
    gpu.index = i;

    char name[kNameBufferSize] = {};
    nvmlReturn_t r = api.DeviceGetName(device, name, sizeof(name));
    if (r != NVML_SUCCESS) return NvmlError(api, "nvmlDeviceGetName", i, r);
    gpu.name = name;

    char uuid[kUuidBufferSize] = {};
    r = api.DeviceGetUUID(device, uuid, sizeof(uuid));
    if (r != NVML_SUCCESS) return NvmlError(api, "nvmlDeviceGetUUID", i, r);
    gpu.uuid = uuid;

    int64_t used = 0;
    absl::Status memory =
        QueryMemory(api, device, i, &gpu.memory_total_bytes, &used);
    if (!memory.ok()) return memory;

    unsigned int current_mig = 0;
    unsigned int pending_mig = 0;
    r = api.DeviceGetMigMode(device, &current_mig, &pending_mig);
    if (r == NVML_SUCCESS) {
      gpu.mig_enabled = current_mig == NVML_DEVICE_MIG_ENABLE;
    } else if (!IsUnsupported(r)) {
      return NvmlError(api, "nvmlDeviceGetMigMode", i, r);
    }

    nvmlPciInfo_t pci = {};
    r = api.DeviceGetPciInfo(device, &pci);
    if (r != NVML_SUCCESS) return NvmlError(api, "nvmlDeviceGetPciInfo_v3", i, r);
    index_by_pci[AddressOf(pci)] = i;
  }

  // NVLink topology. A link index beyond the GPU's link count answers
  // NOT_SUPPORTED or INVALID_ARGUMENT; GPUs without NVLink answer
  // NOT_SUPPORTED for every link.
  std::vector<bool> on_switch(n, false);
  std::vector<std::vector<bool>> linked(n, std::vector<bool>(n, false));
  for (int i = 0; i < n; ++i) {
    nvmlDevice_t device = (*devices)[i];
    for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      nvmlEnableState_t active = 0;
      nvmlReturn_t r = api.DeviceGetNvLinkState(device, link, &active);
      if (r == NVML_ERROR_INVALID_ARGUMENT || r == NVML_ERROR_NOT_FOUND ||
          IsUnsupported(r)) {
        continue;
      }
      if (r != NVML_SUCCESS) {
        return NvmlError(api, "nvmlDeviceGetNvLinkState", i, r);
      }
      if (active != NVML_FEATURE_ENABLED) continue;
      if (api.DeviceGetNvLinkRemoteDeviceType != nullptr) {
        int type = 0;
        if (api.DeviceGetNvLinkRemoteDeviceType(device, link, &type) ==
                NVML_SUCCESS &&
            type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
          on_switch[i] = true;
          continue;
        }
      }
      nvmlPciInfo_t remote = {};
      r = api.DeviceGetNvLinkRemotePciInfo(device, link, &remote);
      if (r != NVML_SUCCESS) continue;  // Remote end unknown: not a peer.
      auto it = index_by_pci.find(AddressOf(remote));
      if (it != index_by_pci.end() && it->second != i) {
        linked[i][it->second] = linked[it->second][i] = true;
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j && (linked[i][j] || (on_switch[i] && on_switch[j]))) {
        gpus[i].nvlink_peers.push_back(j);
      }
    }
  }
  return gpus;
}

absl::StatusOr<std::vector<GpuSample>> NvmlGpuInventory::Sample() {
  absl::MutexLock lock(&mu_);
  const Api& api = *api_;
  absl::StatusOr<std::vector<nvmlDevice_t>> devices = Devices(api);
  if (!devices.ok()) return devices.status();

  std::vector<GpuSample> samples(devices->size());
  for (int i = 0; i < static_cast<int>(samples.size()); ++i) {
    nvmlDevice_t device = (*devices)[i];
    GpuSample& sample = samples[i];
    sample.index = i;

    int64_t total = 0;
    absl::Status memory =
        QueryMemory(api, device, i, &total, &sample.memory_used_bytes);
    if (!memory.ok()) return memory;

    nvmlUtilization_t utilization = {};
    nvmlReturn_t r = api.DeviceGetUtilizationRates(device, &utilization);
    if (r == NVML_SUCCESS) {
      sample.utilization_pct = static_cast<int>(utilization.gpu);
    } else if (!IsUnsupported(r)) {
      return NvmlError(api, "nvmlDeviceGetUtilizationRates", i, r);
    }

    unsigned int temperature_c = 0;
    r = api.DeviceGetTemperature(device, NVML_TEMPERATURE_GPU, &temperature_c);
    if (r == NVML_SUCCESS) {
      sample.temperature_c = static_cast<int>(temperature_c);
    } else if (!IsUnsupported(r)) {
      return NvmlError(api, "nvmlDeviceGetTemperature", i, r);
    }

    unsigned int power_mw = 0;
    r = api.DeviceGetPowerUsage(device, &power_mw);
    if (r == NVML_SUCCESS) {
      sample.power_w = power_mw / 1000.0;
    } else if (!IsUnsupported(r)) {
      return NvmlError(api, "nvmlDeviceGetPowerUsage", i, r);
    }
  }
  if (api.GpmQueryDeviceSupport != nullptr) {
    gpm_.resize(devices->size());
    for (int i = 0; i < static_cast<int>(samples.size()); ++i) {
      SampleGpmLocked((*devices)[i], i, samples[i]);
    }
  }
  return samples;
}

void NvmlGpuInventory::SampleGpmLocked(void* handle, int i, GpuSample& sample) {
  const Api& api = *api_;
  nvmlDevice_t device = static_cast<nvmlDevice_t>(handle);
  GpmState& g = gpm_[i];
  if (g.support == GpmState::kUnknown) {
    nvmlGpmSupport_t support = {};
    support.version = NVML_GPM_SUPPORT_VERSION;
    const nvmlReturn_t r = api.GpmQueryDeviceSupport(device, &support);
    const bool ok = r == NVML_SUCCESS && support.isSupportedDevice != 0;
    nvmlGpmSample_t a = nullptr, b = nullptr;
    if (ok && api.GpmSampleAlloc(&a) == NVML_SUCCESS &&
        api.GpmSampleAlloc(&b) == NVML_SUCCESS) {
      g.previous = a;
      g.current = b;
      g.support = GpmState::kYes;
    } else {
      if (a != nullptr) api.GpmSampleFree(a);
      g.support = GpmState::kNo;
    }
    TC_LOG_INFO("GPU {}: activity from {}", i,
                g.support == GpmState::kYes
                    ? "NVML GPM (SM activity, SM occupancy, DRAM bandwidth)"
                    : absl::StrFormat("NVML utilization (no GPM: %s)",
                                      r == NVML_SUCCESS ? "device not supported"
                                                        : api.Error(r)));
  }
  if (g.support != GpmState::kYes) return;
  nvmlGpmSample_t current = static_cast<nvmlGpmSample_t>(g.current);
  nvmlReturn_t r = api.GpmSampleGet(device, current);
  if (r != NVML_SUCCESS) {
    // A transient failure (e.g. under a profiler holding the counters):
    // this sample falls back to utilization, the next pair starts over.
    g.have_previous = false;
    TC_LOG_DEBUG("GPU {}: nvmlGpmSampleGet failed: {}", i, api.Error(r));
    return;
  }
  if (g.have_previous) {
    auto get = std::make_unique<nvmlGpmMetricsGet_t>();
    *get = {};
    get->version = NVML_GPM_METRICS_GET_VERSION;
    get->numMetrics = 3;
    get->sample1 = static_cast<nvmlGpmSample_t>(g.previous);
    get->sample2 = current;
    get->metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
    get->metrics[1].metricId = NVML_GPM_METRIC_SM_OCCUPANCY;
    get->metrics[2].metricId = NVML_GPM_METRIC_DRAM_BW_UTIL;
    r = api.GpmMetricsGet(get.get());
    // Samples closer than the driver's refresh (100 ms) give errors.
    if (r == NVML_SUCCESS && get->metrics[0].nvmlReturn == NVML_SUCCESS &&
        get->metrics[2].nvmlReturn == NVML_SUCCESS) {
      auto pct = [](double v) { return std::clamp(v, 0.0, 100.0); };
      sample.gpm = true;
      sample.sm_active_pct = pct(get->metrics[0].value);
      sample.sm_occupancy_pct = get->metrics[1].nvmlReturn == NVML_SUCCESS
                                    ? pct(get->metrics[1].value)
                                    : 0;
      sample.dram_bw_pct = pct(get->metrics[2].value);
    }
  }
  std::swap(g.previous, g.current);
  g.have_previous = true;
}

absl::StatusOr<std::vector<ProcessGpuSample>> NvmlGpuInventory::SampleProcesses() {
  absl::MutexLock lock(&mu_);
  const Api& api = *api_;
  std::vector<ProcessGpuSample> out;
  if (api.DeviceGetComputeRunningProcesses == nullptr) return out;  // Old driver.
  absl::StatusOr<std::vector<nvmlDevice_t>> devices = Devices(api);
  if (!devices.ok()) return devices.status();
  last_util_timestamp_.resize(devices->size(), 0);
  for (int i = 0; i < static_cast<int>(devices->size()); ++i) {
    nvmlDevice_t device = (*devices)[i];
    // The process list can grow between the two calls: retry with room.
    auto list = [&](decltype(api.DeviceGetComputeRunningProcesses) fn,
                    std::vector<nvmlProcessInfo_t>& procs) {
      procs.resize(16);
      nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
      for (int attempt = 0; attempt < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
        unsigned int count = static_cast<unsigned int>(procs.size());
        r = fn(device, &count, procs.data());
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
          procs.resize(count + 16);
        } else {
          procs.resize(r == NVML_SUCCESS ? count : 0);
        }
      }
      return r;
    };
    std::vector<nvmlProcessInfo_t> procs;
    nvmlReturn_t r = list(api.DeviceGetComputeRunningProcesses, procs);
    if (r != NVML_SUCCESS) {
      if (IsUnsupported(r)) continue;
      return NvmlError(api, "nvmlDeviceGetComputeRunningProcesses_v3", i, r);
    }
    if (api.DeviceGetMpsComputeRunningProcesses != nullptr) {
      // MPS clients (trainctl-agent --mps); none without an MPS server.
      std::vector<nvmlProcessInfo_t> clients;
      if (list(api.DeviceGetMpsComputeRunningProcesses, clients) == NVML_SUCCESS) {
        for (const nvmlProcessInfo_t& c : clients) {
          const bool listed = std::any_of(procs.begin(), procs.end(),
                                          [&](const nvmlProcessInfo_t& p) { return p.pid == c.pid; });
          if (!listed) procs.push_back(c);
        }
      }
    }
    const size_t first = out.size();
    for (const nvmlProcessInfo_t& p : procs) {
      ProcessGpuSample& s = out.emplace_back();
      s.gpu_index = i;
      s.pid = static_cast<int>(p.pid);
      s.memory_used_bytes = p.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE
                                ? -1
                                : static_cast<int64_t>(p.usedGpuMemory);
    }
    if (api.DeviceGetProcessUtilization == nullptr || out.size() == first) continue;
    // Samples newer than the last call's newest; the newest per process wins.
    unsigned int count = 0;
    r = api.DeviceGetProcessUtilization(device, nullptr, &count,
                                        last_util_timestamp_[i]);
    if (r != NVML_ERROR_INSUFFICIENT_SIZE || count == 0) continue;
    std::vector<nvmlProcessUtilizationSample_t> util(count);
    r = api.DeviceGetProcessUtilization(device, util.data(), &count,
                                        last_util_timestamp_[i]);
    if (r != NVML_SUCCESS) continue;  // NOT_FOUND: no new samples.
    util.resize(count);
    std::sort(util.begin(), util.end(), [](const auto& a, const auto& b) {
      return a.timeStamp < b.timeStamp;
    });
    for (const nvmlProcessUtilizationSample_t& u : util) {
      last_util_timestamp_[i] = std::max(last_util_timestamp_[i], u.timeStamp);
      for (size_t k = first; k < out.size(); ++k) {
        if (out[k].pid == static_cast<int>(u.pid)) {
          out[k].sm_util_pct = static_cast<int>(std::min(100u, u.smUtil));
        }
      }
    }
  }
  return out;
}

}  // namespace trainctl::worker
