// phantom's fake CUDA device for CPU-only builds of PyTorch.
//
// A CPU-only libtorch has no device guard and no hooks for DeviceType::CUDA, so
// `tensor.to("cuda")`, `nn.Module.cuda()` and the autograd engine (which asks the
// CUDA hooks whether the device exists) fail before any Python-level fake tensor
// machinery can step in. This library registers both:
//   * a DeviceGuardImpl that tracks the current device index per thread and treats
//     streams and events as no-ops (stream semantics are simulated in Python), and
//   * CUDAHooks that report CUDA as present with PHANTOM_DEVICE_COUNT devices.
// It holds no memory and runs no kernels: every CUDA tensor is a FakeTensor.
// It must be loaded with RTLD_GLOBAL before `import torch`, because libtorch caches
// the hooks object during import.
//
// CUDA builds of torch (compiled with -DPHANTOM_CUDA_BUILD) already register a real guard
// and real hooks from libc10_cuda/libtorch_cuda; without a driver both fail (no device,
// "Found no NVIDIA driver"). There build.py loads libtorch_cuda.so first, then this
// library, so its registrations replace the real ones: the guard by being written last
// into c10's guard table, the hooks by a higher registry priority (a plain second
// registration of "CUDAHooks" with the same priority aborts the process).
//
// Both builds report cuDNN (version 9), so convolution picks the cuDNN backend and
// the output memory format (channels_last in, channels_last out) a real GPU gives.
//
// phantom_set_storage_address gives a fake CUDA storage the address phantom's caching
// allocator model placed it at; phantom_set_fake_device and phantom_exclude_fake_key let C++
// read a fake tensor's device without calling into Python (see Note [Fake device slot]).
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#ifdef PHANTOM_CUDA_BUILD
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#endif

namespace phantom {

static c10::DeviceIndex device_count_from_env() {
  const char* value = std::getenv("PHANTOM_DEVICE_COUNT");
  if (value == nullptr) return 8;
  int n = std::atoi(value);
  return static_cast<c10::DeviceIndex>(n > 0 ? n : 1);
}

static c10::DeviceIndex device_count() {
  static c10::DeviceIndex count = device_count_from_env();
  return count;
}

static thread_local c10::DeviceIndex g_current_device = 0;

struct FakeCUDAGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old(c10::DeviceType::CUDA, g_current_device);
    if (d.has_index()) g_current_device = d.index();
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::CUDA, g_current_device);
  }
  void setDevice(c10::Device d) const override {
    if (d.has_index()) g_current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) g_current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  // Events and streams: ordering is simulated in Python, so these are no-ops.
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(CUDA, FakeCUDAGuardImpl)

// Page-locked host memory (`pin_memory()`, `torch.empty(..., pin_memory=True)`, DataLoader's
// pin_memory=True, the buffers DDP's reducer and FSDP's CPU offload allocate) is ordinary CPU
// memory here: no driver can lock it, and nothing needs it locked, since no DMA reads it. The
// allocator remembers its blocks so `is_pinned()` (isPinnedPtr) answers as on a GPU machine,
// and phantom times a copy to or from such a tensor as a pinned transfer.
//
// Like PyTorch's CachingHostAllocator (aten/src/ATen/core/CachingHostAllocator.h) it rounds
// sizes up to a power of two and keeps freed blocks for reuse: on a GPU machine a training loop
// that pins a buffer a step (activation offloading, a pinning DataLoader) allocates from that
// cache after its first step. Freeing to the system here instead would make every step pay
// this machine's page faults and unmapping, which the script's host time would count.
class FakePinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return {nullptr, nullptr, &free_block, c10::Device(c10::DeviceType::CPU)};
    size_t size = round_size(nbytes);
    void* data = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        data = it->second;
        free_.erase(it);
      }
    }
    if (data == nullptr) data = c10::alloc_cpu(size);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_[reinterpret_cast<uintptr_t>(data)] = size;
    }
    return {data, data, &free_block, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool contains(const void* ptr) const {
    auto address = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) return false;
    --it;
    return address < it->first + it->second;
  }

 private:
  static size_t round_size(size_t nbytes) {
    size_t size = 1;
    while (size < nbytes) size <<= 1;
    return size;
  }

  static void free_block(void* data) {
    if (data == nullptr) return;
    FakePinnedAllocator& self = instance();
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.blocks_.find(reinterpret_cast<uintptr_t>(data));
    if (it == self.blocks_.end()) return;
    self.free_.emplace(it->second, data);  // cached, as PyTorch's host allocator does
    self.blocks_.erase(it);
  }

 public:
  static FakePinnedAllocator& instance() {
    static FakePinnedAllocator* allocator = new FakePinnedAllocator();  // never destroyed
    return *allocator;
  }

 private:
  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> blocks_;  // start -> size of each live pinned block
  std::multimap<size_t, void*> free_;   // size -> cached free blocks
};

struct FakeCUDAHooks final : public at::CUDAHooksInterface {
  explicit FakeCUDAHooks(at::CUDAHooksArgs) {}
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasCUDART() const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  int getNumGPUs() const override { return device_count(); }
  c10::DeviceIndex current_device() const override { return g_current_device; }
  c10::DeviceIndex getCurrentDevice() const override { return g_current_device; }
  void setCurrentDevice(c10::DeviceIndex d) const override { g_current_device = d; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = g_current_device;
    g_current_device = d;
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  // cuDNN as on the GPU hosts: ATen's conv backend choice and memory-format suggestion
  // (ConvUtils.h, cudnn_conv_suggest_memory_format) read these.
  bool hasCuDNN() const override { return true; }
  bool compiledWithCuDNN() const override { return true; }
  bool supportsDilatedConvolutionWithCuDNN() const override { return true; }
  bool supportsDepthwiseConvolutionWithCuDNN() const override { return true; }
  bool supportsBFloat16ConvolutionWithCuDNNv8() const override { return true; }
  long versionCuDNN() const override { return 91000; }
  long versionRuntimeCuDNN() const override { return 91000; }
  double batchnormMinEpsilonCuDNN() const override { return 0.0; }  // CUDNN_BN_MIN_EPSILON
  long versionCUDART() const override { return 12080; }
  std::string showConfig() const override { return "phantom simulated CUDA\n"; }
  void deviceSynchronize(c10::DeviceIndex) const override {}
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return &FakePinnedAllocator::instance();
  }
  bool isPinnedPtr(const void* data) const override {
    return FakePinnedAllocator::instance().contains(data);
  }
};

}  // namespace phantom

#ifdef PHANTOM_CUDA_BUILD
// DDP's reducer times its first iterations with the timer registered for the parameters'
// device type; libtorch_cuda's CudaTimer records real CUDA events (cudaErrorInsufficientDriver
// without a driver). A host-clock timer, as the CPU build's reducer falls back to, replaces it:
// it only feeds DDP's runtime logging.
namespace phantom {
struct HostTimer final : public c10d::Timer {
  explicit HostTimer(c10::Device) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    int64_t a = getTimeRef(start), b = getTimeRef(end);
    if (a == c10d::kUnsetTime || b == c10d::kUnsetTime) return std::nullopt;
    return b - a;
  }
};
}  // namespace phantom
namespace c10d {
C10_REGISTER_TYPED_CLASS_WITH_PRIORITY(TimerRegistry, c10::kCUDA, c10::REGISTRY_PREFERRED,
                                       phantom::HostTimer)
}  // namespace c10d
#endif

// libtorch creates its hooks object by the registry key "CUDAHooks".
namespace at {
#ifdef PHANTOM_CUDA_BUILD
// Outranks libtorch_cuda's CUDAHooks (REGISTRY_DEFAULT), registered before us.
C10_REGISTER_TYPED_CLASS_WITH_PRIORITY(CUDAHooksRegistry, "CUDAHooks", c10::REGISTRY_PREFERRED,
                                       phantom::FakeCUDAHooks)
#else
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", phantom::FakeCUDAHooks)
#endif
}  // namespace at

extern "C" int phantom_fake_cuda_loaded() { return 1; }

// A fake tensor's storage is a meta storage whose data pointer is null, so every fake CUDA
// tensor had data_ptr() 0 (plus its offset). Frameworks compare data pointers to tell
// storages apart (FSDP's _same_storage, accelerate's parameter re-mapping after wrapping,
// DeepSpeed's parameter counts); with all of them 0 every storage looked like one. This sets
// the pointer to the simulated device address of the storage's block. Nothing reads through
// it: meta kernels never touch data, and the DataPtr has no deleter, so nothing frees it.
// `storage_impl` is the StorageImpl* Python exposes as UntypedStorage._cdata; only meta
// storages (a fake tensor's) are touched: returns 1 if it set the pointer, 0 otherwise. The
// context is the pointer itself, as for a plain allocation, so copy-on-write (`_lazy_clone`)
// takes it as a simple data pointer.
extern "C" int phantom_set_storage_address(void* storage_impl, uintptr_t address) {
  auto* storage = static_cast<c10::StorageImpl*>(storage_impl);
  if (storage == nullptr || !storage->device().is_meta()) return 0;
  void* data = reinterpret_cast<void*>(address);
  storage->set_data_ptr_noswap(c10::DataPtr(data, data, &c10::detail::deleteNothing, storage->device()));
  return 1;
}

// Note [Fake device slot]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A Python FakeTensor reports its device through the python_custom_device policy: every
// `tensor.device()` read in C++ (autograd recording each op's inputs, the engine checking
// every gradient, the foreach optimizers grouping tensors by device) calls into Python and
// dispatches prim.device, ~75% of all dispatches of a training step, 6-20 us each on a slow
// host where a real tensor answers from a field. That time is phantom's, not the script's,
// and taking it off the measured host gaps (a mean cost per entry, clipped at zero) charges
// too much host time in code full of such reads (Megatron's local spec makes ~35,000 an
// iteration).
//
// c10's own C++ fake-device slot (TensorImpl::set_fake_device, added for a C++ FakeTensor)
// answers device() from the tensor itself, and answers the meta device instead while the
// Fake dispatch key is excluded in this thread. phantom keeps the slot and drops what else
// set_fake_device does for that C++ mode: the Fake key is taken out of the tensor's key set
// (no kernel is registered for it; the Python key still routes the tensor's ops), and the
// Python device policy is turned off.
//
// FakeTensorMode runs an op's meta kernel on the fake tensors themselves, and the kernel must
// see them on the meta device (in Python that is FakeTensor.__torch_dispatch__'s prim.device
// answer under in_kernel_invocation). Excluding the Fake key in this thread for that span
// makes the slot answer meta; the caller's dispatch-key guard restores it.
#ifdef PHANTOM_FAKE_DEVICE_SLOT  // build.py: c10 has TensorImpl::set_fake_device
namespace {
// key_set_ is protected: a pointer to it formed inside a derived class is legal C++
struct TensorImplAccess : c10::TensorImpl {
  static c10::DispatchKeySet c10::TensorImpl::*key_set() { return &TensorImplAccess::key_set_; }
};
}  // namespace

// Sets the slot (see Note [Fake device slot]): `impl` is the TensorImpl* Python exposes as
// Tensor._cdata; `type`, `index`: the c10::Device. Returns 1.
extern "C" int phantom_set_fake_device(void* impl, int type, int index) {
  auto* tensor = static_cast<c10::TensorImpl*>(impl);
  if (tensor == nullptr || type == static_cast<int>(c10::DeviceType::Meta)) return 0;
  tensor->set_fake_device(c10::Device(static_cast<c10::DeviceType>(type),
                                      static_cast<c10::DeviceIndex>(index)));
  auto key_set = TensorImplAccess::key_set();
  tensor->*key_set = (tensor->*key_set).remove(c10::DispatchKey::Fake);
  tensor->set_python_custom_device(false);
  return 1;
}

// Excludes the Fake key in this thread while a meta kernel runs (see Note [Fake device slot]).
extern "C" void phantom_exclude_fake_key(int on) {
  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::Fake, on != 0);
}
#endif  // PHANTOM_FAKE_DEVICE_SLOT
