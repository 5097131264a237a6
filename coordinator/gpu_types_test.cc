// GpuTypeOf: the --gpu-type a user writes for the GPUs NVML names.

#include "coordinator/gpu_types.h"

#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

TEST(GpuTypeOfTest, NvmlProductNames) {
  EXPECT_EQ(GpuTypeOf("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(GpuTypeOf("NVIDIA H100 PCIe"), "h100");
  EXPECT_EQ(GpuTypeOf("NVIDIA H100 NVL"), "h100");
  EXPECT_EQ(GpuTypeOf("NVIDIA A100-SXM4-40GB"), "a100");
  EXPECT_EQ(GpuTypeOf("NVIDIA A100 80GB PCIe"), "a100");
  EXPECT_EQ(GpuTypeOf("NVIDIA H200"), "h200");
  EXPECT_EQ(GpuTypeOf("Tesla V100-SXM2-16GB"), "v100");
  EXPECT_EQ(GpuTypeOf("Tesla T4"), "t4");
  EXPECT_EQ(GpuTypeOf("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(GpuTypeOf("NVIDIA L40S"), "l40s");
  EXPECT_EQ(GpuTypeOf("NVIDIA B200"), "b200");
}

TEST(GpuTypeOfTest, FakeGpusAndOddNames) {
  EXPECT_EQ(GpuTypeOf("H100"), "h100");  // --fake-gpus 2:H100:80GiB
  EXPECT_EQ(GpuTypeOf("A100"), "a100");
  EXPECT_EQ(GpuTypeOf("NVIDIA"), "nvidia");
  EXPECT_EQ(GpuTypeOf(""), "");
  EXPECT_EQ(GpuTypeOf("Weird GPU*Name"), "weird");
}

TEST(GpuTypeOfTest, SetGpuTypesOverwritesWhatTheAgentSent) {
  v1::Node node;
  v1::Gpu* g = node.add_gpus();
  g->set_name("NVIDIA H100 80GB HBM3");
  g->set_gpu_type("bogus");
  node.add_gpus()->set_name("NVIDIA A100-SXM4-40GB");
  SetGpuTypes(node);
  EXPECT_EQ(node.gpus(0).gpu_type(), "h100");
  EXPECT_EQ(node.gpus(1).gpu_type(), "a100");
}

}  // namespace
}  // namespace trainctl::coord
