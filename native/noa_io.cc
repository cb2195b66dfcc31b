// noa_io: the system calls behind noa's durable appends.
//
// Synchronous primitives (open, write, fdatasync, ftruncate, fsync of a directory, flock, close)
// run on the calling thread. `commit` runs write + fdatasync on a small pool of threads owned by
// this addon instance, so one worker thread can keep many fdatasyncs in flight at once: on ext4
// the journal merges concurrent flushes, which is where throughput across workspaces comes from.
//
// The addon is context-aware: every worker thread that loads it gets its own instance (pool,
// completion handler), and the instance is torn down with that thread's environment.

#include <napi.h>
#include <uv.h>

#include <cerrno>
#include <cstdlib>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

// The prebuilt addon that ships in the package must load wherever Node 20 runs (glibc 2.28 and
// the libstdc++ of GCC 8, as on RHEL 8), while it is built with a newer toolchain. Two
// references would otherwise need a newer libstdc++ than that:
// - condition_variable::wait: GCC 12's libstdc++ gives it a new default version (3.4.30); the
//   reference is bound to the original one (3.4.11), which every libstdc++ since GCC 4.3 keeps
//   with the same behaviour.
// - __throw_bad_array_new_length (3.4.29, GCC 11): what an allocation of an impossible array
//   size calls. Defined here; the addon is built without exceptions, so it ends the process, as
//   the thrown exception would through code that cannot catch it. (Node loads addons with
//   RTLD_LOCAL, so this definition is seen by no other library.)
#if defined(__linux__) && defined(__GLIBCXX__)
__asm__(
    ".symver _ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE,"
    "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11");
#if defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11
namespace std {
void __throw_bad_array_new_length() {
  __builtin_trap();
}
}  // namespace std
#endif
#endif

namespace {

// Builds an Error shaped like Node's own fs errors: `ENOSPC: no space left on device, write
// '<path>'` with code, errno (negative, as libuv reports it), syscall and path.
Napi::Error SystemError(Napi::Env env, int err, const char* syscall, const std::string& path) {
  const char* code = uv_err_name(-err);
  std::string message = std::string(code) + ": " + uv_strerror(-err) + ", " + syscall;
  if (!path.empty()) message += " '" + path + "'";
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, code));
  e.Set("errno", Napi::Number::New(env, -err));
  e.Set("syscall", Napi::String::New(env, syscall));
  if (!path.empty()) e.Set("path", Napi::String::New(env, path));
  return e;
}

// Writes every byte of the iovecs, resuming after short writes and EINTR.
// Returns 0 or an errno.
int WriteAll(int fd, struct iovec* iov, int count) {
  while (count > 0) {
    int n = count > IOV_MAX ? IOV_MAX : count;
    ssize_t written = writev(fd, iov, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    size_t left = static_cast<size_t>(written);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      count--;
    }
    if (count > 0 && left > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

// Writes every byte of the iovecs at `offset` (pwritev), resuming after short writes and EINTR.
// The descriptor must not be O_APPEND: Linux appends on such a descriptor whatever the offset.
int PWriteAll(int fd, struct iovec* iov, int count, off_t offset) {
  while (count > 0) {
    int n = count > IOV_MAX ? IOV_MAX : count;
    ssize_t written = pwritev(fd, iov, n, offset);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    offset += written;
    size_t left = static_cast<size_t>(written);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      count--;
    }
    if (count > 0 && left > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

int DataSync(int fd) {
  while (fdatasync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

enum SyncMode { kNoSync = 0, kFdatasync = 1, kSyncfs = 2, kFsync = 3 };

int FullSync(int fd) {
  while (fsync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

int FsSync(int fd) {
#ifdef NOA_NO_SYNCFS
  return ENOSYS;
#else
  return syncfs(fd) == 0 ? 0 : errno;
#endif
}

// One log's part of a journal round: its iovecs are logIov[first, first + count).
struct LogWrite {
  int fd;
  size_t first;
  size_t count;
  int err = 0;
};

// One file of a placement job: written to `temp` (created, never opened through a symlink),
// synced when the job is durable, then renamed to `target`.
struct Place {
  std::string temp;
  std::string target;
  struct iovec data;
  int mode;
};

struct Job {
  double id;
  int fd;
  int mode;
  off_t offset = -1;  // -1: write (at the end of an O_APPEND file); otherwise pwritev at offset
  std::vector<struct iovec> iov;
  // A journal round: once the journal write (and its sync) succeeded, each log's bytes are
  // appended to it. A log's failure is its own; a journal failure fails the round.
  std::vector<struct iovec> logIov;
  std::vector<LogWrite> logs;
  bool round = false;
  // A placement: every file of `places`, in order; the first failure stops it (`errPath`).
  std::vector<Place> places;
  bool durable = false;
  std::string errPath;
  Napi::Reference<Napi::Value> keep;  // the buffers, alive until the job is delivered
  int err = 0;
  const char* syscall = nullptr;
};

// Places each file of the job: open(temp, O_CREAT|O_EXCL|O_NOFOLLOW), write, fdatasync when
// durable, close, rename(temp, target). A failed file's temp is removed; the files renamed
// before it stay (nothing names them yet).
void RunPlaces(Job* job) {
  for (Place& p : job->places) {
    int fd;
    do {
      fd = open(p.temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, p.mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      job->err = errno;
      job->syscall = "open";
      job->errPath = p.temp;
      return;
    }
    struct iovec iov = p.data;
    int err = iov.iov_len > 0 ? WriteAll(fd, &iov, 1) : 0;
    const char* call = "write";
    if (err == 0 && job->durable) {
      err = DataSync(fd);
      call = "fdatasync";
    }
    if (close(fd) != 0 && errno != EINTR && err == 0) {
      err = errno;
      call = "close";
    }
    if (err == 0 && rename(p.temp.c_str(), p.target.c_str()) != 0) {
      err = errno;
      call = "rename";
    }
    if (err != 0) {
      unlink(p.temp.c_str());
      job->err = err;
      job->syscall = call;
      job->errPath = call[0] == 'r' ? p.target : p.temp;
      return;
    }
  }
}

class Instance {
 public:
  explicit Instance(Napi::Env env) : env_(env) {}

  ~Instance() { Stop(); }

  void SetHandler(Napi::Env env, Napi::Function handler) {
    if (handlerSet_) {
      handler_.Reset(handler, 1);
      return;
    }
    handler_ = Napi::Persistent(handler);
    tsfn_ = Napi::ThreadSafeFunction::New(env, handler, "noa_io.commit", 0, 1);
    tsfn_.Unref(env);
    handlerSet_ = true;
    // Registered after the thread-safe function so that it runs first at teardown (hooks run in
    // reverse order): pool threads are joined before Node closes the function they call.
    napi_add_env_cleanup_hook(env, &Instance::Cleanup, this);
    hookAdded_ = true;
  }

  bool HasHandler() const { return handlerSet_; }

  void Submit(Napi::Env env, Job* job) {
    if (pending_++ == 0) tsfn_.Ref(env);
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back(job);
    if (idle_ == 0 && threads_.size() < maxThreads_) {
      threads_.emplace_back(&Instance::Run, this);
    } else {
      cv_.notify_one();
    }
  }

  void SetMaxThreads(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    maxThreads_ = n;
  }

  Napi::Object Stats(Napi::Env env) {
    std::unique_lock<std::mutex> lock(mu_);
    Napi::Object o = Napi::Object::New(env);
    o.Set("threads", Napi::Number::New(env, static_cast<double>(threads_.size())));
    o.Set("idle", Napi::Number::New(env, static_cast<double>(idle_)));
    o.Set("maxThreads", Napi::Number::New(env, static_cast<double>(maxThreads_)));
    o.Set("queued", Napi::Number::New(env, static_cast<double>(queue_.size())));
    o.Set("pending", Napi::Number::New(env, static_cast<double>(pending_)));
    return o;
  }

 private:
  static void Cleanup(void* arg) {
    Instance* self = static_cast<Instance*>(arg);
    self->hookAdded_ = false;
    self->Stop();
  }

  void Stop() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    if (handlerSet_) tsfn_.Abort();
    if (hookAdded_) napi_remove_env_cleanup_hook(env_, &Instance::Cleanup, this);
    hookAdded_ = false;
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      while (queue_.empty() && !stopping_) {
        idle_++;
        cv_.wait(lock);
        idle_--;
      }
      if (queue_.empty()) return;  // stopping and nothing left to do
      Job* job = queue_.front();
      queue_.pop_front();
      lock.unlock();

      if (!job->places.empty()) {
        RunPlaces(job);
        Finished(job);
        lock.lock();
        continue;
      }
      int count = static_cast<int>(job->iov.size());
      int err = job->offset < 0 ? WriteAll(job->fd, job->iov.data(), count)
                                : PWriteAll(job->fd, job->iov.data(), count, job->offset);
      if (err != 0) {
        job->err = err;
        job->syscall = job->offset < 0 ? "write" : "pwrite";
      } else if (job->mode == kFdatasync) {
        err = DataSync(job->fd);
        if (err != 0) {
          job->err = err;
          job->syscall = "fdatasync";
        }
      } else if (job->mode == kSyncfs) {
        err = FsSync(job->fd);
        if (err != 0) {
          job->err = err;
          job->syscall = "syncfs";
        }
      } else if (job->mode == kFsync) {
        // A folder's descriptor: fsync, not fdatasync, so that its new entries are committed.
        err = FullSync(job->fd);
        if (err != 0) {
          job->err = err;
          job->syscall = "fsync";
        }
      }
      if (job->err == 0) {
        for (auto& log : job->logs) {
          log.err = WriteAll(log.fd, job->logIov.data() + log.first, static_cast<int>(log.count));
        }
      }
      Finished(job);
      lock.lock();
    }
  }

  void Finished(Job* job) {
    bool first;
    {
      std::unique_lock<std::mutex> doneLock(doneMu_);
      first = done_.empty();
      done_.push_back(job);
    }
    // One call drains everything finished so far; later completions ride along.
    if (first) tsfn_.NonBlockingCall(this, &Instance::Deliver);
  }

  static void Deliver(Napi::Env env, Napi::Function handler, Instance* self) {
    if (env == nullptr) return;  // torn down
    std::vector<Job*> jobs;
    {
      std::unique_lock<std::mutex> doneLock(self->doneMu_);
      jobs.swap(self->done_);
    }
    Napi::Function fn = self->handler_.Value();
    for (Job* job : jobs) {
      Napi::HandleScope scope(env);
      Napi::Value err = env.Null();
      if (job->err != 0) err = SystemError(env, job->err, job->syscall, job->errPath).Value();
      // A round's third argument: null, or [index, error] pairs for the logs whose write failed.
      Napi::Value logErrors = env.Null();
      if (job->round && job->err == 0) {
        Napi::Array failed = Napi::Array::New(env);
        uint32_t k = 0;
        for (size_t i = 0; i < job->logs.size(); i++) {
          if (job->logs[i].err == 0) continue;
          failed.Set(k++, Napi::Number::New(env, static_cast<double>(i)));
          failed.Set(k++, SystemError(env, job->logs[i].err, "write", std::string()).Value());
        }
        if (k > 0) logErrors = failed;
      }
      job->keep.Reset();
      double id = job->id;
      delete job;
      if (--self->pending_ == 0) self->tsfn_.Unref(env);
      fn.Call({Napi::Number::New(env, id), err, logErrors});
      if (env.IsExceptionPending()) {
        // The handler must not throw; surface it as an uncaught exception in this thread.
        Napi::Error e = env.GetAndClearPendingException();
        napi_fatal_exception(env, e.Value());
      }
    }
  }

  Napi::Env env_;
  Napi::FunctionReference handler_;
  Napi::ThreadSafeFunction tsfn_;
  bool handlerSet_ = false;
  bool hookAdded_ = false;
  size_t pending_ = 0;  // JS thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  size_t maxThreads_ = 64;
  bool stopping_ = false;

  std::mutex doneMu_;
  std::vector<Job*> done_;
};

Instance* GetInstance(Napi::Env env) { return env.GetInstanceData<Instance>(); }

bool ArgFd(const Napi::CallbackInfo& info, size_t i, int* fd) {
  if (!info[i].IsNumber()) {
    Napi::TypeError::New(info.Env(), "fd must be a number").ThrowAsJavaScriptException();
    return false;
  }
  *fd = info[i].As<Napi::Number>().Int32Value();
  return true;
}

bool ArgString(const Napi::CallbackInfo& info, size_t i, const char* what, std::string* out) {
  if (!info[i].IsString()) {
    Napi::TypeError::New(info.Env(), std::string(what) + " must be a string")
        .ThrowAsJavaScriptException();
    return false;
  }
  *out = info[i].As<Napi::String>().Utf8Value();
  return true;
}

// Collects iovecs from a Buffer or an array of Buffers.
bool ArgBuffers(const Napi::CallbackInfo& info, size_t i, std::vector<struct iovec>* iov) {
  Napi::Value v = info[i];
  auto add = [&](Napi::Value b) -> bool {
    if (!b.IsBuffer()) {
      Napi::TypeError::New(info.Env(), "data must be a Buffer or an array of Buffers")
          .ThrowAsJavaScriptException();
      return false;
    }
    Napi::Buffer<char> buf = b.As<Napi::Buffer<char>>();
    if (buf.Length() > 0) iov->push_back({buf.Data(), buf.Length()});
    return true;
  };
  if (v.IsArray()) {
    Napi::Array arr = v.As<Napi::Array>();
    uint32_t n = arr.Length();
    iov->reserve(n);
    for (uint32_t k = 0; k < n; k++) {
      if (!add(arr.Get(k))) return false;
    }
    return true;
  }
  return add(v);
}

// The type bits of an open file's mode; 0 or an errno. On Linux through statx (glibc 2.28, the
// oldest glibc Node 20 runs on): fstat binds to glibc 2.33's fstat64 symbol, and the prebuilt
// addon that ships in the package must load wherever Node itself does.
#ifdef __linux__
static const char* const kModeCall = "statx";
#else
static const char* const kModeCall = "fstat";
#endif
static int FileMode(int fd, mode_t* mode) {
#ifdef __linux__
  struct statx stx;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_TYPE, &stx) != 0) return errno;
  *mode = stx.stx_mode;
#else
  struct stat st;
  if (fstat(fd, &st) != 0) return errno;
  *mode = st.st_mode;
#endif
  return 0;
}

// fileSize(path) -> size (a regular file), -1 (nothing there), -2 (something else there: a
// symlink, a folder, a FIFO...; the caller lstats it to name what). Never follows a symlink.
// On Linux, statx asks for the type and size alone: a stat that asks for the change time marks
// it as seen, so the file's next write takes a fine-grained timestamp and advances the
// filesystem's timestamp floor, which then changes every other written file's mtime too, and a
// file whose inode is dirty that way has its inode written by the next fdatasync. Polling a
// log's size between commits must not make every commit's sync write an inode as well.
Napi::Value FileSize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  if (!ArgString(info, 0, "path", &path)) return env.Undefined();
  int r;
  mode_t mode;
  double size;
#ifdef __linux__
  struct statx stx;
  do {
    r = statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE | STATX_SIZE, &stx);
  } while (r != 0 && errno == EINTR);
  mode = stx.stx_mode;
  size = static_cast<double>(stx.stx_size);
#else
  struct stat st;
  do {
    r = lstat(path.c_str(), &st);
  } while (r != 0 && errno == EINTR);
  mode = st.st_mode;
  size = static_cast<double>(st.st_size);
#endif
  if (r != 0) {
    if (errno == ENOENT) return Napi::Number::New(env, -1);
#ifdef __linux__
    SystemError(env, errno, "statx", path).ThrowAsJavaScriptException();
#else
    SystemError(env, errno, "lstat", path).ThrowAsJavaScriptException();
#endif
    return env.Undefined();
  }
  if (!S_ISREG(mode)) return Napi::Number::New(env, -2);
  return Napi::Number::New(env, size);
}

// openAppend(path, create, lock) -> fd
// O_RDWR|O_APPEND|O_CLOEXEC|O_NOFOLLOW|O_NONBLOCK (|O_CREAT, 0666 before the umask). Read access
// lets recovery read the tail through the same descriptor it locked. O_NOFOLLOW refuses a
// symlink planted as the log (dangling or not: with O_CREAT too), O_NONBLOCK keeps a FIFO planted
// there from blocking the open; it has no effect on a regular file, which the caller checks the
// descriptor is. With lock, takes an exclusive non-blocking flock on the new descriptor: the lock
// lives exactly as long as the fd, so closing it (or the process dying) releases it.
Napi::Value OpenAppend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  if (!ArgString(info, 0, "path", &path)) return env.Undefined();
  bool create = info[1].ToBoolean().Value();
  bool lock = info[2].ToBoolean().Value();
  int flags = O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (create ? O_CREAT : 0);
  int fd;
  do {
    fd = open(path.c_str(), flags, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    SystemError(env, errno, "open", path).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  mode_t mode = 0;
  int statErr = FileMode(fd, &mode);
  if (statErr != 0 || !S_ISREG(mode)) {
    // Not a regular file (a FIFO or device opened without blocking): refused before anything is
    // locked or written. ENOTREG is not a Linux errno; the caller names the kind of file.
    close(fd);
    if (statErr != 0) {
      SystemError(env, statErr, kModeCall, path).ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Error e = Napi::Error::New(env, "ENOTREG: not a regular file, open '" + path + "'");
    e.Set("code", Napi::String::New(env, "ENOTREG"));
    e.Set("syscall", Napi::String::New(env, "open"));
    e.Set("path", Napi::String::New(env, path));
    e.ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (lock) {
    int r;
    do {
      r = flock(fd, LOCK_EX | LOCK_NB);
    } while (r != 0 && errno == EINTR);
    if (r != 0) {
      int err = errno;
      close(fd);
      SystemError(env, err, "flock", path).ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }
  return Napi::Number::New(env, fd);
}

// flock(fd, exclusive, nonBlocking): takes a lock on an fd opened elsewhere.
Napi::Value Flock(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  int op = info[1].ToBoolean().Value() ? LOCK_EX : LOCK_SH;
  if (info[2].ToBoolean().Value()) op |= LOCK_NB;
  int r;
  do {
    r = flock(fd, op);
  } while (r != 0 && errno == EINTR);
  if (r != 0) SystemError(env, errno, "flock", "").ThrowAsJavaScriptException();
  return env.Undefined();
}

// write(fd, data) -> bytes written. All of it, or an error.
Napi::Value Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  std::vector<struct iovec> iov;
  if (!ArgBuffers(info, 1, &iov)) return env.Undefined();
  size_t total = 0;
  for (auto& v : iov) total += v.iov_len;
  int err = WriteAll(fd, iov.data(), static_cast<int>(iov.size()));
  if (err != 0) {
    SystemError(env, err, "write", "").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Number::New(env, static_cast<double>(total));
}

// pwrite(fd, data, offset) -> bytes written. All of it, or an error.
Napi::Value Pwrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  std::vector<struct iovec> iov;
  if (!ArgBuffers(info, 1, &iov)) return env.Undefined();
  if (!info[2].IsNumber()) {
    Napi::TypeError::New(env, "offset must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  off_t offset = static_cast<off_t>(info[2].As<Napi::Number>().Int64Value());
  size_t total = 0;
  for (auto& v : iov) total += v.iov_len;
  int err = PWriteAll(fd, iov.data(), static_cast<int>(iov.size()), offset);
  if (err != 0) {
    SystemError(env, err, "pwrite", "").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Number::New(env, static_cast<double>(total));
}

Napi::Value Fdatasync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  int err = DataSync(fd);
  if (err != 0) SystemError(env, err, "fdatasync", "").ThrowAsJavaScriptException();
  return env.Undefined();
}

Napi::Value Ftruncate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  if (!info[1].IsNumber()) {
    Napi::TypeError::New(env, "length must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  off_t length = static_cast<off_t>(info[1].As<Napi::Number>().Int64Value());
  int r;
  do {
    r = ftruncate(fd, length);
  } while (r != 0 && errno == EINTR);
  if (r != 0) SystemError(env, errno, "ftruncate", "").ThrowAsJavaScriptException();
  return env.Undefined();
}

// fsyncDir(path): makes a directory's entries (a file just created or renamed into it) durable.
Napi::Value FsyncDir(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path;
  if (!ArgString(info, 0, "path", &path)) return env.Undefined();
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    SystemError(env, errno, "open", path).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int r;
  do {
    r = fsync(fd);
  } while (r != 0 && errno == EINTR);
  int err = r != 0 ? errno : 0;
  close(fd);
  if (err != 0) SystemError(env, err, "fsync", path).ThrowAsJavaScriptException();
  return env.Undefined();
}

// syncfs(fd): flushes every dirty page of the filesystem that holds fd.
Napi::Value Syncfs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  int err = FsSync(fd);
  if (err != 0) SystemError(env, err, "syncfs", "").ThrowAsJavaScriptException();
  return env.Undefined();
}

Napi::Value Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd;
  if (!ArgFd(info, 0, &fd)) return env.Undefined();
  // Linux releases the descriptor even when close reports EINTR; never retry.
  if (close(fd) != 0 && errno != EINTR) {
    SystemError(env, errno, "close", "").ThrowAsJavaScriptException();
  }
  return env.Undefined();
}

// setCompletionHandler(fn): fn(id, errorOrNull) is called on this thread for each finished commit.
Napi::Value SetCompletionHandler(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) {
    Napi::TypeError::New(env, "handler must be a function").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  GetInstance(env)->SetHandler(env, info[0].As<Napi::Function>());
  return env.Undefined();
}

// commit(id, fd, data, mode): on a pool thread, write all of data (a Buffer or an array of
// Buffers), then mode 1: fdatasync(fd), mode 2: syncfs(fd), mode 3: fsync(fd) (a folder's
// descriptor, opened O_RDONLY|O_DIRECTORY), mode 0: nothing. The completion
// handler later receives (id, error|null).
Napi::Value Commit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Instance* inst = GetInstance(env);
  if (!inst->HasHandler()) {
    Napi::Error::New(env, "setCompletionHandler must be called before commit")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (!info[0].IsNumber()) {
    Napi::TypeError::New(env, "id must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Job* job = new Job();
  job->id = info[0].As<Napi::Number>().DoubleValue();
  if (!ArgFd(info, 1, &job->fd) || !ArgBuffers(info, 2, &job->iov)) {
    delete job;
    return env.Undefined();
  }
  job->mode = info[3].IsNumber() ? info[3].As<Napi::Number>().Int32Value() : kNoSync;
  if (job->mode < kNoSync || job->mode > kFsync) {
    delete job;
    Napi::RangeError::New(env, "mode must be 0 (none), 1 (fdatasync), 2 (syncfs) or 3 (fsync)")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  job->keep = Napi::Persistent(info[2]);
  inst->Submit(env, job);
  return env.Undefined();
}

// commitRound(id, journalFd, journalData, journalOffset, mode, logFds, logData): on a pool
// thread, pwrite all of journalData at journalOffset, sync it by mode (1 fdatasync, 0 none: the
// descriptor is O_DSYNC), then append logData[i] (a Buffer or an array of Buffers) to logFds[i].
// The completion handler receives (id, error|null, null | [index, error, ...] of failed logs).
Napi::Value CommitRound(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Instance* inst = GetInstance(env);
  if (!inst->HasHandler()) {
    Napi::Error::New(env, "setCompletionHandler must be called before commitRound")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (!info[0].IsNumber() || !info[3].IsNumber() || !info[4].IsNumber() || !info[5].IsArray() ||
      !info[6].IsArray()) {
    Napi::TypeError::New(env, "commitRound(id, fd, data, offset, mode, fds[], data[])")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Job* job = new Job();
  job->round = true;
  job->id = info[0].As<Napi::Number>().DoubleValue();
  job->offset = static_cast<off_t>(info[3].As<Napi::Number>().Int64Value());
  job->mode = info[4].As<Napi::Number>().Int32Value();
  if (!ArgFd(info, 1, &job->fd) || !ArgBuffers(info, 2, &job->iov)) {
    delete job;
    return env.Undefined();
  }
  if (job->offset < 0 || (job->mode != kNoSync && job->mode != kFdatasync)) {
    delete job;
    Napi::RangeError::New(env, "offset must be >= 0 and mode 0 (none) or 1 (fdatasync)")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array fds = info[5].As<Napi::Array>();
  Napi::Array datas = info[6].As<Napi::Array>();
  uint32_t n = fds.Length();
  if (datas.Length() != n) {
    delete job;
    Napi::RangeError::New(env, "logFds and logData differ in length").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  job->logs.reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    Napi::Value fdv = fds.Get(i);
    Napi::Value dv = datas.Get(i);
    if (!fdv.IsNumber() || !dv.IsBuffer()) {
      delete job;
      Napi::TypeError::New(env, "logFds must be numbers and logData Buffers").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Buffer<char> buf = dv.As<Napi::Buffer<char>>();
    LogWrite w{fdv.As<Napi::Number>().Int32Value(), job->logIov.size(), 0};
    if (buf.Length() > 0) {
      job->logIov.push_back({buf.Data(), buf.Length()});
      w.count = 1;
    }
    job->logs.push_back(w);
  }
  Napi::Array keep = Napi::Array::New(env, 2);
  keep.Set(0u, info[2]);
  keep.Set(1u, datas);
  job->keep = Napi::Persistent(keep.As<Napi::Value>());
  inst->Submit(env, job);
  return env.Undefined();
}

// placeBatch(id, temps, targets, data, modes, durable): on a pool thread, for each file in
// order, write data[i] to a new file temps[i] (O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW, modes[i]
// before the umask), fdatasync it if durable, and rename it to targets[i]. The completion
// handler receives (id, error|null); an error names its path and stops the rest of the list.
Napi::Value PlaceBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Instance* inst = GetInstance(env);
  if (!inst->HasHandler()) {
    Napi::Error::New(env, "setCompletionHandler must be called before placeBatch")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (!info[0].IsNumber() || !info[1].IsArray() || !info[2].IsArray() || !info[3].IsArray() ||
      !info[4].IsArray()) {
    Napi::TypeError::New(env, "placeBatch(id, temps[], targets[], data[], modes[], durable)")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Array temps = info[1].As<Napi::Array>();
  Napi::Array targets = info[2].As<Napi::Array>();
  Napi::Array datas = info[3].As<Napi::Array>();
  Napi::Array modes = info[4].As<Napi::Array>();
  uint32_t n = temps.Length();
  if (n == 0 || targets.Length() != n || datas.Length() != n || modes.Length() != n) {
    Napi::RangeError::New(env, "placeBatch: temps, targets, data and modes must be non-empty and of one length")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Job* job = new Job();
  job->id = info[0].As<Napi::Number>().DoubleValue();
  job->durable = info[5].ToBoolean().Value();
  job->places.reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    Napi::Value t = temps.Get(i);
    Napi::Value g = targets.Get(i);
    Napi::Value d = datas.Get(i);
    Napi::Value m = modes.Get(i);
    if (!t.IsString() || !g.IsString() || !d.IsBuffer() || !m.IsNumber()) {
      delete job;
      Napi::TypeError::New(env, "placeBatch: paths must be strings, data Buffers, modes numbers")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Buffer<char> buf = d.As<Napi::Buffer<char>>();
    job->places.push_back({t.As<Napi::String>().Utf8Value(), g.As<Napi::String>().Utf8Value(),
                           {buf.Data(), buf.Length()}, m.As<Napi::Number>().Int32Value()});
  }
  job->keep = Napi::Persistent(info[3]);
  inst->Submit(env, job);
  return env.Undefined();
}

// alignedBuffer(size, alignment) -> Buffer of zeros whose memory starts at a multiple of
// alignment (a power of two >= sizeof(void*)): what O_DIRECT writes need, which JavaScript
// cannot ask of an ArrayBuffer. Freed when the Buffer is collected.
Napi::Value AlignedBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || !info[1].IsNumber()) {
    Napi::TypeError::New(env, "alignedBuffer(size, alignment)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  double size = info[0].As<Napi::Number>().DoubleValue();
  double alignment = info[1].As<Napi::Number>().DoubleValue();
  size_t a = static_cast<size_t>(alignment);
  if (size < 1 || size > (1u << 30) || a < sizeof(void*) || (a & (a - 1)) != 0 || a > (1u << 20)) {
    Napi::RangeError::New(env, "size must be 1..2^30 and alignment a power of two from 8 to 2^20")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  void* p = nullptr;
  if (posix_memalign(&p, a, static_cast<size_t>(size)) != 0) {
    Napi::Error::New(env, "alignedBuffer: out of memory").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::memset(p, 0, static_cast<size_t>(size));
  return Napi::Buffer<char>::New(env, static_cast<char*>(p), static_cast<size_t>(size),
                                 [](Napi::Env, char* data) { free(data); });
}

Napi::Value SetMaxThreads(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || info[0].As<Napi::Number>().Int32Value() < 1) {
    Napi::RangeError::New(env, "threads must be a number >= 1").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  GetInstance(env)->SetMaxThreads(static_cast<size_t>(info[0].As<Napi::Number>().Int32Value()));
  return env.Undefined();
}

Napi::Value PoolStats(const Napi::CallbackInfo& info) {
  return GetInstance(info.Env())->Stats(info.Env());
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData<Instance>(new Instance(env));
  exports.Set("openAppend", Napi::Function::New(env, OpenAppend, "openAppend"));
  exports.Set("flock", Napi::Function::New(env, Flock, "flock"));
  exports.Set("write", Napi::Function::New(env, Write, "write"));
  exports.Set("pwrite", Napi::Function::New(env, Pwrite, "pwrite"));
  exports.Set("fdatasync", Napi::Function::New(env, Fdatasync, "fdatasync"));
  exports.Set("fileSize", Napi::Function::New(env, FileSize, "fileSize"));
  exports.Set("ftruncate", Napi::Function::New(env, Ftruncate, "ftruncate"));
  exports.Set("fsyncDir", Napi::Function::New(env, FsyncDir, "fsyncDir"));
  exports.Set("syncfs", Napi::Function::New(env, Syncfs, "syncfs"));
  exports.Set("close", Napi::Function::New(env, Close, "close"));
  exports.Set("setCompletionHandler",
              Napi::Function::New(env, SetCompletionHandler, "setCompletionHandler"));
  exports.Set("commit", Napi::Function::New(env, Commit, "commit"));
  exports.Set("commitRound", Napi::Function::New(env, CommitRound, "commitRound"));
  exports.Set("placeBatch", Napi::Function::New(env, PlaceBatch, "placeBatch"));
  exports.Set("setMaxThreads", Napi::Function::New(env, SetMaxThreads, "setMaxThreads"));
  exports.Set("alignedBuffer", Napi::Function::New(env, AlignedBuffer, "alignedBuffer"));
  exports.Set("poolStats", Napi::Function::New(env, PoolStats, "poolStats"));
  return exports;
}

}  // namespace

NODE_API_MODULE(noa_io, Init)
