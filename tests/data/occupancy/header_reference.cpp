// header_reference.cpp - NVIDIA's reference occupancy calculator (cuda_occupancy.h) on random configurations,
// for every compute capability, host only (no GPU needed).
//
//   g++ -O2 -std=c++17 -I$CUDA_HOME/include header_reference.cpp -o header_reference
//   ./header_reference > header_reference.csv
//
// Device properties per compute capability are the cudaDeviceProp values of the CUDA C++ Programming Guide's
// per-capability table (the same numbers as specs/arch/*.yaml). Columns: cc, threads, regs, static_smem,
// dynamic_smem, max_dynamic_smem, carveout (-1 = default), blocks (-1 = error), then for a second query the
// header's cudaOccAvailableDynamicSMemPerBlock answer for num_blocks (-1 = error) and
// cudaOccMaxPotentialOccupancyBlockSize's block size.
#include <cuda_occupancy.h>
#include <cstdio>
#include <random>

struct CC { int major, minor, threads_per_sm; size_t smem_sm, optin, reserved; };

int main() {
  const CC ccs[] = {{7, 0, 2048, 96 * 1024, 96 * 1024, 0},       {7, 5, 1024, 64 * 1024, 64 * 1024, 0},
                    {8, 0, 2048, 164 * 1024, 163 * 1024, 1024},  {8, 6, 1536, 100 * 1024, 99 * 1024, 1024},
                    {8, 7, 1536, 164 * 1024, 163 * 1024, 1024},  {8, 9, 1536, 100 * 1024, 99 * 1024, 1024},
                    {9, 0, 2048, 228 * 1024, 227 * 1024, 1024},  {10, 0, 2048, 228 * 1024, 227 * 1024, 1024},
                    {12, 0, 1536, 100 * 1024, 99 * 1024, 1024}};
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<int> ut(1, 1024), ur(0, 255), uc(-1, 100), u100(0, 99), unb(1, 33);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  printf("cc,threads,regs,static_smem,dynamic_smem,max_dynamic_smem,carveout,blocks,num_blocks,available_dynamic_smem,"
         "potential_block_size\n");
  for (const CC& c : ccs) {
    cudaOccDeviceProp p;
    p.computeMajor = c.major; p.computeMinor = c.minor; p.maxThreadsPerBlock = 1024;
    p.maxThreadsPerMultiprocessor = c.threads_per_sm; p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536;
    p.warpSize = 32; p.sharedMemPerBlock = 48 * 1024; p.sharedMemPerMultiprocessor = c.smem_sm; p.numSms = 1;
    p.sharedMemPerBlockOptin = c.optin; p.reservedSharedMemPerBlock = c.reserved;
    for (int i = 0; i < 6000; i++) {
      cudaOccFuncAttributes a;
      a.maxThreadsPerBlock = 1024;
      a.numRegs = u100(rng) < 70 ? ur(rng) : 8 * (ur(rng) / 8);
      a.sharedSizeBytes = u100(rng) < 50 ? 0 : (size_t)(ud(rng) * 48 * 1024);
      a.partitionedGCConfig = PARTITIONED_GC_OFF;
      a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
      size_t dyn_default = 48 * 1024 - a.sharedSizeBytes, dyn_optin = c.optin - a.sharedSizeBytes;
      int m = u100(rng);
      a.maxDynamicSharedSizeBytes = m < 70 ? dyn_optin : (m < 90 ? dyn_default : (size_t)(ud(rng) * dyn_optin));
      a.numBlockBarriers = 1;
      a.virtualResourceCount = 0;
      cudaOccDeviceState s;
      s.carveoutConfig = u100(rng) < 30 ? -1 : uc(rng);
      int t = u100(rng) < 50 ? ut(rng) : 32 * (1 + ut(rng) / 32 % 32);
      int r = u100(rng);
      size_t d = r < 25 ? 0 : (r < 60 ? (size_t)(ud(rng) * (c.smem_sm + 4096)) : (size_t)std::exp(ud(rng) * std::log((double)c.smem_sm)));
      cudaOccResult res;
      int blocks = cudaOccMaxActiveBlocksPerMultiprocessor(&res, &p, &a, &s, t, d) == CUDA_OCC_SUCCESS
                       ? res.activeBlocksPerMultiprocessor : -1;
      int nb = unb(rng);
      size_t avail = 0;
      long av = cudaOccAvailableDynamicSMemPerBlock(&avail, &p, &a, &s, nb, t) == CUDA_OCC_SUCCESS ? (long)avail : -1;
      int mg = 0, bs = 0;
      if (cudaOccMaxPotentialOccupancyBlockSize(&mg, &bs, &p, &a, &s, d) != CUDA_OCC_SUCCESS) bs = -1;
      printf("%d.%d,%d,%d,%zu,%zu,%zu,%d,%d,%d,%ld,%d\n", c.major, c.minor, t, a.numRegs, a.sharedSizeBytes, d,
             a.maxDynamicSharedSizeBytes, s.carveoutConfig, blocks, nb, av, bs);
    }
  }
  return 0;
}
