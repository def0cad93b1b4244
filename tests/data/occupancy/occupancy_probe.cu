// occupancy_probe.cu - ask the CUDA runtime for occupancy over many kernels and launch configurations.
//
// Build and run (see README.md in this folder):
//   nvcc -O2 -std=c++17 -arch=sm_90 -o occupancy_probe occupancy_probe.cu
//   ./occupancy_probe OUTDIR [seed]
//
// Kernels: a register-pressure kernel instantiated with __maxnreg__(N) for many N (the real count is read
// back with cudaFuncGetAttributes), small kernels without a register cap (counts below ptxas's __maxnreg__
// floor of 24), and kernels with static shared memory of many sizes. For each, the program queries
//   cudaOccupancyMaxActiveBlocksPerMultiprocessor      -> occupancy.csv
//   cudaOccupancyMaxPotentialBlockSize(VariableSMem)   -> potential_block_size.csv
//   cudaOccupancyAvailableDynamicSMemPerBlock          -> available_dynamic_smem.csv
// over block sizes, dynamic shared memory, cudaFuncAttributeMaxDynamicSharedMemorySize and
// cudaFuncAttributePreferredSharedMemoryCarveout. carveout -2 in the CSVs means the attribute was never set.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

constexpr int V = 300;  // live values: more than 255 registers' worth, so __maxnreg__ decides the count

template <int SMEM>
__device__ __forceinline__ float touch_smem(float s) {
  if constexpr (SMEM > 0) {
    __shared__ volatile char buf[SMEM];
    buf[threadIdx.x % SMEM] = (char)s;
    __syncthreads();
    s += (float)buf[(threadIdx.x * 13u + 1u) % SMEM];
  }
  return s;
}

template <int NREG, int SMEM>
__global__ void __maxnreg__(NREG) kreg(const float* __restrict__ in, float* out, int n) {
  float acc[V];
#pragma unroll
  for (int i = 0; i < V; i++) acc[i] = in[threadIdx.x + i * n];
#pragma unroll
  for (int i = 0; i < V; i++) acc[i] = fmaf(acc[i], acc[(i + 1) % V], acc[(i * 7 + 3) % V]);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < V; i++) s += acc[i] * (float)i;
  s = touch_smem<SMEM>(s);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// small kernels with W live values and no register cap: counts under 24
template <int W, int SMEM>
__global__ void knat(const float* __restrict__ in, float* out, int n) {
  float s = 0.f;
  if constexpr (W > 0) {
    float acc[W];
#pragma unroll
    for (int i = 0; i < W; i++) acc[i] = in[threadIdx.x + i * n];
#pragma unroll
    for (int i = 0; i < W; i++) acc[i] = fmaf(acc[i], acc[(i + 1) % W], 1.0f);
#pragma unroll
    for (int i = 0; i < W; i++) s += acc[i] * (float)(i + 1);
  }
  s = touch_smem<SMEM>(s);
  if (W >= 0) out[threadIdx.x] = s;
}
__global__ void kempty() {}

struct PerThread {  // dynamic shared memory = bytes per thread x block size
  int per;
  __host__ __device__ size_t operator()(int b) const { return (size_t)b * per; }
};

struct K { const void* fn; std::string name; };
static std::vector<K> kernels;

template <int N, int S> void add_reg() { kernels.push_back({(const void*)kreg<N, S>, "kreg<" + std::to_string(N) + "," + std::to_string(S) + ">"}); }
template <int W, int S> void add_nat() { kernels.push_back({(const void*)knat<W, S>, "knat<" + std::to_string(W) + "," + std::to_string(S) + ">"}); }
template <int S, int... Ns> void add_regs() { (add_reg<Ns, S>(), ...); }

static void build_kernel_list() {
  kernels.push_back({(const void*)kempty, "kempty"});
  add_nat<0, 0>(); add_nat<1, 0>(); add_nat<2, 0>(); add_nat<3, 0>(); add_nat<4, 0>(); add_nat<6, 0>();
  add_nat<8, 0>(); add_nat<10, 0>(); add_nat<12, 0>(); add_nat<14, 0>(); add_nat<16, 0>(); add_nat<20, 0>();
  add_regs<0, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48,
           49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 68, 70, 72, 73, 76, 79, 80, 81,
           84, 87, 88, 89, 92, 95, 96, 97, 100, 104, 105, 110, 112, 113, 120, 121, 125, 128, 129, 136, 137,
           144, 150, 152, 160, 161, 168, 170, 176, 184, 190, 192, 200, 208, 210, 216, 224, 230, 232, 240, 248,
           250, 255>();
  // static shared memory, at 32 registers and a few other counts
  add_regs<1, 32>(); add_regs<100, 32>(); add_regs<127, 32>(); add_regs<128, 32>(); add_regs<129, 32>();
  add_regs<1000, 32, 64>(); add_regs<1024, 32>(); add_regs<1025, 32>(); add_regs<3000, 40>(); add_regs<4096, 32>();
  add_regs<8000, 32>(); add_regs<8192, 48>(); add_regs<12288, 32>(); add_regs<16384, 32, 64, 128>();
  add_regs<20000, 32>(); add_regs<24576, 32, 96>(); add_regs<30000, 56>(); add_regs<32768, 32>();
  add_regs<40000, 32>(); add_regs<45056, 32>(); add_regs<47104, 32>(); add_regs<48128, 32>();
  add_regs<49152, 32, 64, 168>();
  add_nat<4, 2048>(); add_nat<8, 49152>();
}

struct Attr { int regs, static_smem, max_threads, max_dyn_default, local, ptx, binary; };
static std::vector<Attr> attrs;
static std::vector<int> cur_carve, cur_maxdyn;
static cudaDeviceProp prop;

static std::vector<int> set_err;  // last cudaFuncSetAttribute error per kernel (0 = none)
static void set_state(int k, int carve, int maxdyn) {
  if (carve != cur_carve[k] && carve != -2) {
    cudaError_t e = cudaFuncSetAttribute(kernels[k].fn, cudaFuncAttributePreferredSharedMemoryCarveout, carve);
    if (e != cudaSuccess) {
      fprintf(stderr, "set carveout %d on %s: %s\n", carve, kernels[k].name.c_str(), cudaGetErrorString(e));
      cudaGetLastError();
      set_err[k] = (int)e;
    }
    cur_carve[k] = carve;
  }
  if (maxdyn != cur_maxdyn[k]) {
    CK(cudaFuncSetAttribute(kernels[k].fn, cudaFuncAttributeMaxDynamicSharedMemorySize, maxdyn));
    cur_maxdyn[k] = maxdyn;
  }
}

static FILE* occ_f;
static long n_occ = 0;
static void occ(int k, int threads, long dyn, int carve, int maxdyn) {
  set_state(k, carve, maxdyn);
  int blocks = -1;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernels[k].fn, threads, (size_t)dyn);
  if (e != cudaSuccess) { blocks = -1; cudaGetLastError(); }
  fprintf(occ_f, "%d,%d,%d,%d,%ld,%d,%d,%d,%d\n", k, attrs[k].regs, attrs[k].static_smem, threads, dyn,
          maxdyn, cur_carve[k], blocks, set_err[k] ? 1000 + set_err[k] : (int)e);
  n_occ++;
}

int main(int argc, char** argv) {
  std::string out = argc > 1 ? argv[1] : ".";
  unsigned seed = argc > 2 ? (unsigned)atoi(argv[2]) : 20261202u;
  std::mt19937_64 rng(seed);
  CK(cudaSetDevice(0));
  CK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0, rt = 0;
  CK(cudaDriverGetVersion(&drv));
  CK(cudaRuntimeGetVersion(&rt));
  FILE* f = fopen((out + "/device.json").c_str(), "w");
  fprintf(f, "{\n \"name\": \"%s\", \"major\": %d, \"minor\": %d, \"driver_version\": %d, \"runtime_version\": %d,\n"
             " \"maxThreadsPerBlock\": %d, \"maxThreadsPerMultiProcessor\": %d, \"maxBlocksPerMultiProcessor\": %d,\n"
             " \"regsPerBlock\": %d, \"regsPerMultiprocessor\": %d, \"warpSize\": %d,\n"
             " \"sharedMemPerBlock\": %zu, \"sharedMemPerMultiprocessor\": %zu, \"sharedMemPerBlockOptin\": %zu,\n"
             " \"reservedSharedMemPerBlock\": %zu, \"multiProcessorCount\": %d, \"l2CacheSize\": %d, \"seed\": %u\n}\n",
          prop.name, prop.major, prop.minor, drv, rt, prop.maxThreadsPerBlock, prop.maxThreadsPerMultiProcessor,
          prop.maxBlocksPerMultiProcessor, prop.regsPerBlock, prop.regsPerMultiprocessor, prop.warpSize,
          prop.sharedMemPerBlock, prop.sharedMemPerMultiprocessor, prop.sharedMemPerBlockOptin,
          prop.reservedSharedMemPerBlock, prop.multiProcessorCount, prop.l2CacheSize, seed);
  fclose(f);
  printf("device %s cc %d.%d driver %d runtime %d SMs %d\n", prop.name, prop.major, prop.minor, drv, rt,
         prop.multiProcessorCount);

  build_kernel_list();
  const int nk = (int)kernels.size();
  f = fopen((out + "/kernels.csv").c_str(), "w");
  fprintf(f, "kernel,name,regs,static_smem,max_threads,max_dyn_default,local_bytes,ptx,binary\n");
  for (int k = 0; k < nk; k++) {
    cudaFuncAttributes a;
    CK(cudaFuncGetAttributes(&a, kernels[k].fn));
    attrs.push_back({a.numRegs, (int)a.sharedSizeBytes, a.maxThreadsPerBlock, a.maxDynamicSharedSizeBytes,
                     (int)a.localSizeBytes, a.ptxVersion, a.binaryVersion});
    cur_carve.push_back(-2);
    set_err.push_back(0);
    cur_maxdyn.push_back(a.maxDynamicSharedSizeBytes);
    fprintf(f, "%d,\"%s\",%d,%zu,%d,%d,%zu,%d,%d\n", k, kernels[k].name.c_str(), a.numRegs, a.sharedSizeBytes,
            a.maxThreadsPerBlock, a.maxDynamicSharedSizeBytes, a.localSizeBytes, a.ptxVersion, a.binaryVersion);
  }
  fclose(f);
  printf("%d kernels\n", nk);
  const int optin = (int)prop.sharedMemPerBlockOptin;
  auto def_dyn = [&](int k) { return attrs[k].max_dyn_default; };
  auto opt_dyn = [&](int k) { return optin - attrs[k].static_smem; };

  occ_f = fopen((out + "/occupancy.csv").c_str(), "w");
  fprintf(occ_f, "kernel,regs,static_smem,threads,dynamic_smem,max_dynamic_smem,carveout,blocks,error\n");

  // A: every block size 1..1024, untouched attributes, no dynamic shared memory
  for (int k = 0; k < nk; k++)
    for (int t = 1; t <= 1024; t++) occ(k, t, 0, -2, def_dyn(k));
  fflush(occ_f); printf("A done: %ld rows\n", n_occ); fflush(stdout);

  // X: block sizes the runtime cannot launch
  for (int k = 0; k < nk; k += 7)
    for (int t : {0, 1025, 1056, 2048}) occ(k, t, 0, -2, def_dyn(k));

  // B: grid over block size x dynamic smem x carveout x max-dynamic attribute for a subset of kernels
  const int threadsB[] = {1, 32, 33, 128, 256, 384, 768, 1024};
  const long dynB[] = {0, 1, 127, 128, 129, 1000, 1024, 2048, 3072, 4096, 7168, 8192, 10000, 15360, 16384, 20480,
                       24576, 30000, 31744, 32768, 40000, 46080, 47104, 48128, 49152, 50000, 57344, 64512, 65536,
                       80000, 99328, 101376, 102400, 116736, 131072, 134144, 150000, 166912, 167936, 196608,
                       200000, 215040, 225280, 231424, 232448, 233472, 240000};
  const int carveB[] = {-1, 0, 3, 4, 8, 14, 15, 28, 29, 43, 44, 57, 58, 72, 86, 100};
  std::vector<int> subsetB;
  for (int k = 0; k < nk; k++) {
    const std::string& nm = kernels[k].name;
    if (nm == "kempty" || nm == "kreg<32,0>" || nm == "kreg<64,0>" || nm == "kreg<128,0>" || nm == "kreg<255,0>" ||
        nm == "kreg<37,0>" || (attrs[k].static_smem > 0 && k % 3 == 0) || nm == "kreg<32,49152>" ||
        nm == "kreg<32,1>" || nm == "knat<4,2048>")
      subsetB.push_back(k);
  }
  for (int k : subsetB)
    for (int mode = 0; mode < 2; mode++)
      for (int c : carveB)
        for (int t : threadsB)
          for (long d : dynB) occ(k, t, d, c, mode ? opt_dyn(k) : def_dyn(k));
  fflush(occ_f); printf("B done: %ld rows (%zu kernels)\n", n_occ, subsetB.size()); fflush(stdout);

  // D: every carveout percent for a few configurations
  for (int k : {0, 20, 40, 60, 90, nk - 3})
    for (int t : {128, 256, 1024})
      for (long d : {0L, 4096L, 20000L, 40000L, 90000L, 150000L})
        for (int c = -1; c <= 100; c++) occ(k, t, d, c, opt_dyn(k));
  fflush(occ_f); printf("D done: %ld rows\n", n_occ); fflush(stdout);

  // E: random configurations over all kernels
  std::uniform_int_distribution<int> uk(0, nk - 1), ut(1, 1024), uw(1, 32), uc(0, 100), u100(0, 99);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  for (int i = 0; i < 80000; i++) {
    int k = uk(rng);
    int t = u100(rng) < 50 ? ut(rng) : 32 * uw(rng);
    long d;
    int r = u100(rng);
    if (r < 25) d = 0;
    else if (r < 60) d = (long)(ud(rng) * 240000.0);
    else if (r < 85) d = (long)std::exp(ud(rng) * std::log(240000.0));
    else d = 1024L * (long)(ud(rng) * 234);
    int c = u100(rng) < 30 ? -1 : uc(rng);
    int m = u100(rng);
    int md = m < 70 ? opt_dyn(k) : (m < 90 ? def_dyn(k) : (int)(ud(rng) * (opt_dyn(k) + 1)));
    occ(k, t, d, c, md);
  }
  fflush(occ_f); printf("E done: %ld rows\n", n_occ); fflush(stdout);
  fclose(occ_f);

  // P: cudaOccupancyMaxPotentialBlockSize
  f = fopen((out + "/potential_block_size.csv").c_str(), "w");
  fprintf(f, "kernel,regs,static_smem,dynamic_smem,smem_per_thread,block_size_limit,max_dynamic_smem,carveout,"
             "min_grid_size,block_size,error\n");
  long n_pot = 0;
  for (int k = 0; k < nk; k++)
    for (int c : {-1, 0, 25, 50, 100})
      for (int mode = 0; mode < 2; mode++) {
        int md = mode ? opt_dyn(k) : def_dyn(k);
        set_state(k, c, md);
        for (long d : {0L, 1024L, 8192L, 16384L, 32768L, 49152L, 65536L, 102400L, 200000L})
          for (int lim : {0, 64, 100, 257, 500, 1000}) {
            if (lim && d % 16384 != 0) continue;
            int mg = -1, bs = -1;
            cudaError_t e = cudaOccupancyMaxPotentialBlockSize(&mg, &bs, kernels[k].fn, (size_t)d, lim);
            if (e != cudaSuccess) cudaGetLastError();
            fprintf(f, "%d,%d,%d,%ld,0,%d,%d,%d,%d,%d,%d\n", k, attrs[k].regs, attrs[k].static_smem, d, lim, md,
                    cur_carve[k], mg, bs, (int)e);
            n_pot++;
          }
        for (int per : {4, 8, 32, 100, 200}) {
          int mg = -1, bs = -1;
          cudaError_t e = cudaOccupancyMaxPotentialBlockSizeVariableSMem(
              &mg, &bs, kernels[k].fn, PerThread{per}, 0);
          if (e != cudaSuccess) cudaGetLastError();
          fprintf(f, "%d,%d,%d,0,%d,0,%d,%d,%d,%d,%d\n", k, attrs[k].regs, attrs[k].static_smem, per, md,
                  cur_carve[k], mg, bs, (int)e);
          n_pot++;
        }
      }
  fclose(f);
  printf("P done: %ld rows\n", n_pot); fflush(stdout);

  // S: cudaOccupancyAvailableDynamicSMemPerBlock
  f = fopen((out + "/available_dynamic_smem.csv").c_str(), "w");
  fprintf(f, "kernel,regs,static_smem,num_blocks,threads,max_dynamic_smem,carveout,bytes,error\n");
  long n_av = 0;
  for (int k = 0; k < nk; k += (k < 110 ? 2 : 1))
    for (int c : {-1, 0, 10, 25, 50, 75, 100})
      for (int mode = 0; mode < 2; mode++) {
        int md = mode ? opt_dyn(k) : def_dyn(k);
        set_state(k, c, md);
        for (int nb : {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 33})
          for (int t : {1, 32, 64, 100, 128, 256, 512, 1024}) {
            size_t bytes = 0;
            cudaError_t e = cudaOccupancyAvailableDynamicSMemPerBlock(&bytes, kernels[k].fn, nb, t);
            if (e != cudaSuccess) { cudaGetLastError(); bytes = 0; }
            fprintf(f, "%d,%d,%d,%d,%d,%d,%d,%zu,%d\n", k, attrs[k].regs, attrs[k].static_smem, nb, t, md,
                    cur_carve[k], bytes, (int)e);
            n_av++;
          }
      }
  fclose(f);
  printf("S done: %ld rows\n", n_av);
  printf("total occupancy rows %ld\n", n_occ);
  return 0;
}
