// Team calls: a compiled function run with the threads of the process's OpenMP runtime (the
// one PyTorch's intra-op parallelism uses) as the workers of its scheduled kernels.
//
// Generated code hands each worker's chunk but the first to MLIR's async runtime
// (mlirAsyncRuntimeExecute), whose thread pool is a second set of threads. Between two of
// PyTorch's parallel operators its OpenMP threads spin for a while (libgomp's default wait
// policy): on a machine with as many cores as threads, a spinning OpenMP thread and an async
// worker then share a core, and each kernel's join waits for the scheduler to hand the worker
// its turn. hector_team_call runs the function on the calling thread inside a parallel region
// of that OpenMP runtime instead; hector_async_execute (bound in place of
// mlirAsyncRuntimeExecute) queues the chunks the calling thread dispatches during the call,
// and the region's other threads run them. Outside a team call (or in a team of one thread,
// as in a nested region) it forwards to MLIR's own mlirAsyncRuntimeExecute.
//
// The chunks and their order of combination are the generated code's: only which thread runs
// a chunk changes, so results are the same as with MLIR's pool. After a team call whose
// helpers ran none of its chunks, the next SOLO_CALLS calls make no region: pool calls, or
// with those off every chunk on the calling thread at its join. hector.runtime.team_calls turns team calls on
// (HECTOR_TEAM_CALLS=1); generated code bound to hector_async_* works the same without them.
//
// Pool calls (hector_pool_begin/end, the default otherwise) use the same queue with Hector's
// own helper threads instead of a region: see "Pool calls" below.

#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

namespace {

using Resume = void (*)(void*);
using Execute = void (*)(void*, Resume);
using AwaitAll = void (*)(void*);
using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
using OmpInt = int (*)();

struct Task {
    void* handle;
    Resume resume;
};

struct Pool;

struct Team {
    void (*fn)(void*) = nullptr;
    void* arg = nullptr;
    std::mutex mu;
    std::deque<Task> queue;
    std::atomic<int> queued{0};
    std::atomic<bool> done{false};
    std::atomic<uint32_t> news{0};    // bumped at every push and at the end: the futex word
    std::atomic<int> sleepers{0};     // helpers waiting on `news`
    std::atomic<int> pushed{0};       // chunks the call queued
    std::atomic<int> helped{0};       // of those, run by a helper
    std::atomic<int> running{0};      // chunks a helper has taken and not finished
    // Pool calls only: the pool it was published to (null: solo, every chunk on the caller),
    // and its owners (the caller and each helper inside it): the last one out deletes it.
    Pool* pool = nullptr;
    std::atomic<int> refs{1};
};

// Calls make no region (pool calls, or solo: every chunk on the calling thread) after a team
// call whose helpers ran none of its chunks: they were not given a core while it ran (other
// processes hold the cores), so a region would only add its start and end, which wait for them.
constexpr int SOLO_CALLS = 8;
std::atomic<int> g_solo_left{0};

// The least a helper spins between two chunks of a call before it sleeps until the next push
// or the end of the call (what 512 pauses took), leaving its core to other threads.
constexpr int64_t CALL_SPIN_NS = 20000;

// Spin windows, in nanoseconds of the monotonic clock (hector_pool_set_spin): how long a pool
// helper stays awake after a call, watching for the next one before it sleeps, and how long
// the calling thread watches at a join for the chunks helpers are running before it blocks.
// A sleeping thread is woken by a futex and the scheduler, which on a VM whose other core is
// idle costs tens to hundreds of microseconds: more than a kernel's share of a 1-2 ms call.
// Off by default: on 2 shared cores a spinning thread took the core from PyTorch's operators
// between a training step's kernels (docs/optimizations.md, "Chunks and spin windows").
constexpr int64_t IDLE_SPIN_NS = 0;
constexpr int64_t JOIN_SPIN_NS = 0;
std::atomic<int64_t> g_idle_spin_ns{IDLE_SPIN_NS};
std::atomic<int64_t> g_join_spin_ns{JOIN_SPIN_NS};
std::atomic<uint64_t> g_pool_naps{0};  // times a pool helper went to sleep between calls

int64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Spin until done() or for `floor_ns`, or the window `*window_ns` if longer (read with the
// clock, every 64 probes: a window shortened meanwhile ends the spin); whether done().
template <typename Done>
bool spin_until(Done done, const std::atomic<int64_t>* window_ns, int64_t floor_ns = 0) {
    const int64_t start = monotonic_ns();
    for (unsigned probe = 0;; ++probe) {
        if (done()) return true;
        if (probe % 64 == 0) {
            int64_t window = std::max(window_ns->load(std::memory_order_relaxed), floor_ns);
            if (monotonic_ns() - start >= window) return false;
            sched_yield();  // a thread waiting for this core (another process's) runs first
        }
        cpu_relax();
    }
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen, nullptr,
            nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
            nullptr, 0);
}

// Something for the helpers: bump the futex word and wake those asleep.
void announce(Team* team) {
    team->news.fetch_add(1, std::memory_order_seq_cst);
    if (team->sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&team->news);
}

struct OpenMp {
    GompParallel parallel = nullptr;
    OmpInt thread_num = nullptr;
    OmpInt num_threads = nullptr;
};

std::atomic<Execute> g_execute{nullptr};
std::atomic<uint64_t> g_queued_total{0};  // chunks team calls queued since the process started
std::atomic<uint64_t> g_pool_queued{0};   // chunks pool calls queued since the process started
std::atomic<uint64_t> g_pool_helped{0};   // of those, run by a pool helper
std::atomic<AwaitAll> g_await_all{nullptr};
thread_local Team* t_team = nullptr;

const OpenMp& open_mp() {
    static const OpenMp found = [] {
        OpenMp o;
        o.parallel = reinterpret_cast<GompParallel>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
        o.thread_num = reinterpret_cast<OmpInt>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
        o.num_threads = reinterpret_cast<OmpInt>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
        if (!o.thread_num || !o.num_threads) o.parallel = nullptr;
        return o;
    }();
    return found;
}

bool pop(Team* team, Task* task) {
    if (team->queued.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard<std::mutex> lock(team->mu);
    if (team->queue.empty()) return false;
    *task = team->queue.front();
    team->queue.pop_front();
    team->queued.fetch_sub(1, std::memory_order_release);
    return true;
}

// A helper of the team: run queued chunks until the calling thread's function returns.
// Between chunks it spins for the idle spin window (at least CALL_SPIN_NS), then sleeps
// until the next announcement.
void help(Team* team) {
    Task task;
    while (true) {
        uint32_t seen = team->news.load(std::memory_order_seq_cst);
        if (pop(team, &task)) {
            team->running.fetch_add(1, std::memory_order_acq_rel);
            task.resume(task.handle);
            team->running.fetch_sub(1, std::memory_order_acq_rel);
            team->helped.fetch_add(1, std::memory_order_relaxed);
            if (team->fn == nullptr) g_pool_helped.fetch_add(1, std::memory_order_relaxed);
            continue;
        }
        if (team->done.load(std::memory_order_acquire)) return;
        if (spin_until([&] { return team->news.load(std::memory_order_acquire) != seen; },
                       &g_idle_spin_ns, CALL_SPIN_NS))
            continue;
        team->sleepers.fetch_add(1, std::memory_order_seq_cst);
        if (team->queued.load(std::memory_order_seq_cst) == 0 &&
            !team->done.load(std::memory_order_seq_cst))
            futex_wait(&team->news, seen);
        team->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
}

void region(void* data) {
    Team* team = static_cast<Team*>(data);
    const OpenMp& o = open_mp();
    if (o.thread_num() != 0) {
        help(team);
        return;
    }
    // A team of one thread (a nested region, OMP_THREAD_LIMIT): nobody would run the queue.
    Team* previous = t_team;
    t_team = o.num_threads() > 1 ? team : nullptr;
    team->fn(team->arg);
    t_team = previous;
    team->done.store(true, std::memory_order_release);
    announce(team);
}

// -- Pool calls: the default ------------------------------------------------------------------
//
// Hector's own helper threads (started on first use, at most the OpenMP runtime's thread count
// less one) take the chunks a call queues; the caller runs those still queued when it reaches a
// join. A helper the scheduler has not run yet (other processes hold the cores) thus never
// holds a join: the caller does its chunk. Nor does any start or end of the call wait for a
// helper: the call's Team is shared (refs), and the last of the caller and the helpers inside
// it deletes it. One call at a time is published to the helpers; a call made while another
// is (another Python thread's) runs solo, as does one in a process whose helpers could not
// start. After a call a helper stays awake for the idle spin window (hector_pool_set_spin),
// watching for the next call, then sleeps on the pool's futex word, bumped at every chunk a
// published call queues. At a join the caller, once the queue is empty, watches the chunks the
// helpers are running end for the join spin window before it blocks in MLIR's await.

struct Pool {
    std::mutex mu;                       // guards current, helpers and the hand-over of refs
    Team* current = nullptr;             // the published call, if any
    int helpers = 0;                     // threads started
    std::atomic<uint32_t> word{0};       // the idle helpers' futex word
    std::atomic<int> sleepers{0};        // helpers asleep on `word`
    std::atomic<uint64_t> published{0};  // calls published to the helpers so far
};

// The pool of this process: a forked child gets a fresh one (at_fork_child), since the
// parent's helpers do not exist in it. Never destroyed: helpers outlive static destructors.
std::atomic<Pool*> g_pool{nullptr};
constexpr int MAX_HELPERS = 255;

void release(Team* team) {
    if (team->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete team;
}

// The published call, with a ref taken for the helper; null when there is none to help.
Team* join_current(Pool* pool) {
    std::lock_guard<std::mutex> lock(pool->mu);
    Team* team = pool->current;
    if (team == nullptr || team->done.load(std::memory_order_acquire)) return nullptr;
    team->refs.fetch_add(1, std::memory_order_relaxed);
    return team;
}

// Between calls: stay awake for the idle spin window, until a call is published or something
// is queued; whether one was (else the helper sleeps).
bool next_call_soon(Pool* pool, uint32_t seen, uint64_t published) {
    return spin_until(
        [&] {
            return pool->published.load(std::memory_order_acquire) != published ||
                   pool->word.load(std::memory_order_acquire) != seen;
        },
        &g_idle_spin_ns);
}

void helper_main(Pool* pool) {
    while (true) {
        uint32_t seen = pool->word.load(std::memory_order_seq_cst);
        uint64_t published = pool->published.load(std::memory_order_seq_cst);
        if (Team* team = join_current(pool)) {
            help(team);
            release(team);
            continue;
        }
        if (next_call_soon(pool, seen, published)) continue;
        g_pool_naps.fetch_add(1, std::memory_order_relaxed);
        pool->sleepers.fetch_add(1, std::memory_order_seq_cst);
        if (pool->word.load(std::memory_order_seq_cst) == seen) futex_wait(&pool->word, seen);
        pool->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
}

void at_fork_child() { g_pool.store(new Pool, std::memory_order_release); }

Pool* pool_of_process() {
    static const bool registered = [] {
        g_pool.store(new Pool, std::memory_order_release);
        pthread_atfork(nullptr, nullptr, at_fork_child);
        return true;
    }();
    (void)registered;
    return g_pool.load(std::memory_order_acquire);
}

// Start helpers until there are `wanted` (the pool's lock held); false if none could start.
bool start_helpers(Pool* pool, int wanted) {
    if (wanted > MAX_HELPERS) wanted = MAX_HELPERS;
    while (pool->helpers < wanted) {
        try {
            std::thread(helper_main, pool).detach();
        } catch (const std::exception&) {  // std::system_error, std::bad_alloc
            break;  // no more threads: the calls run with those there are, or solo
        }
        ++pool->helpers;
    }
    return pool->helpers > 0;
}

// Something queued in a published pool call: wake the helpers asleep between calls.
void wake_idle_helpers(Pool* pool) {
    pool->word.fetch_add(1, std::memory_order_seq_cst);
    if (pool->sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&pool->word);
}

int default_threads() {
    auto max_threads = reinterpret_cast<OmpInt>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (max_threads != nullptr) return max_threads();
    unsigned cores = std::thread::hardware_concurrency();
    return cores > 0 ? static_cast<int>(cores) : 1;
}

}  // namespace

extern "C" {

void* hector_pool_begin(int threads);
void hector_pool_end(void* handle);

// Team calls that follow make their next `calls` calls without a region, as after a team call
// whose helpers ran none of its chunks (for tests: that depends on the scheduler otherwise).
void hector_team_set_solo_calls(int calls) { g_solo_left.store(calls < 0 ? 0 : calls); }

// Bind MLIR's mlirAsyncRuntimeExecute and mlirAsyncRuntimeAwaitAllInGroup, which
// hector_async_execute and hector_async_await_all_in_group call outside team calls (and the
// latter, in one, once the queue is empty).
void hector_team_set_fallbacks(Execute execute, AwaitAll await_all) {
    g_execute.store(execute);
    g_await_all.store(await_all);
}

// Chunks team calls have queued since the process started.
uint64_t hector_team_queued() { return g_queued_total.load(std::memory_order_relaxed); }

// Whether the process has an OpenMP runtime team calls can use (GOMP_parallel: libgomp, or
// LLVM's libomp, which also provides it).
int hector_team_available() { return open_mp().parallel != nullptr ? 1 : 0; }

// Run fn(arg) on the calling thread inside a parallel region of `threads` OpenMP threads (0:
// the runtime's default, PyTorch's torch.get_num_threads()), the others running the chunks
// the call dispatches. Without an OpenMP runtime, or with threads == 1, fn(arg) runs directly.
// The calls after a team call whose helpers ran none of its chunks run without a region: as
// pool calls when `pool_fallback` is nonzero, else solo (every chunk on the calling thread).
void hector_team_call(void (*fn)(void*), void* arg, int threads, int pool_fallback) {
    const OpenMp& o = open_mp();
    if (o.parallel == nullptr || threads == 1 || t_team != nullptr) {
        fn(arg);
        return;
    }
    Team team;
    team.fn = fn;
    team.arg = arg;
    int solo = g_solo_left.load(std::memory_order_relaxed);
    if (solo > 0) {  // no region: the calling thread (and the pool's helpers) run the chunks
        g_solo_left.store(solo - 1, std::memory_order_relaxed);
        if (pool_fallback != 0) {
            void* pooled = hector_pool_begin(threads);
            fn(arg);
            hector_pool_end(pooled);
            return;
        }
        t_team = &team;
        fn(arg);
        t_team = nullptr;
        return;
    }
    o.parallel(region, &team, threads < 0 ? 0u : static_cast<unsigned>(threads), 0u);
    if (team.pushed.load() >= 2 && team.helped.load() == 0) g_solo_left.store(SOLO_CALLS);
}

// mlirAsyncRuntimeExecute's replacement: queue the task for the team of the calling thread's
// team call, else hand it to MLIR's runtime.
void hector_async_execute(void* handle, Resume resume) {
    Team* team = t_team;
    if (team != nullptr) {
        {
            std::lock_guard<std::mutex> lock(team->mu);
            team->queue.push_back(Task{handle, resume});
        }
        team->queued.fetch_add(1, std::memory_order_release);
        team->pushed.fetch_add(1, std::memory_order_relaxed);
        if (team->fn == nullptr) {  // a pool call
            g_pool_queued.fetch_add(1, std::memory_order_relaxed);
            if (team->pool != nullptr) wake_idle_helpers(team->pool);
        } else {
            g_queued_total.fetch_add(1, std::memory_order_relaxed);
        }
        announce(team);
        return;
    }
    Execute fallback = g_execute.load();
    if (fallback != nullptr) {
        fallback(handle, resume);
    } else {
        resume(handle);  // no runtime bound: run it here (the caller awaits it after)
    }
}

// mlirAsyncRuntimeAwaitAllInGroup's replacement: in a team call, run the chunks still queued
// on the calling thread first (a helper the scheduler has not run yet leaves its chunk to the
// caller instead of holding the join), then wait for those the helpers took.
void hector_async_await_all_in_group(void* group) {
    Team* team = t_team;
    Task task;
    while (team != nullptr && pop(team, &task)) task.resume(task.handle);
    if (team != nullptr) {  // the chunks helpers took: watch them end before blocking
        spin_until([team] { return team->running.load(std::memory_order_acquire) == 0; },
                   &g_join_spin_ns);
    }
    AwaitAll fallback = g_await_all.load();
    if (fallback != nullptr) fallback(group);
}

}  // extern "C"

extern "C" {

// Begin a pool call on the calling thread: until hector_pool_end, the chunks the compiled code
// it calls queues go to the pool's helpers (at most `threads` - 1 of them; `threads` <= 0: the
// OpenMP runtime's omp_get_max_threads(), PyTorch's thread count) and the caller runs those
// still queued at each join. With `threads` == 1, or while another thread's call holds the
// pool, the caller runs them all (solo). Returns the handle hector_pool_end takes (null inside
// a team or pool call already running on this thread: the inner call changes nothing).
void* hector_pool_begin(int threads) {
    if (t_team != nullptr) return nullptr;
    if (threads <= 0) threads = default_threads();
    Team* team = new (std::nothrow) Team;
    if (team == nullptr) return nullptr;  // no memory: the chunks go to MLIR's pool
    if (threads > 1) {
        Pool* pool = pool_of_process();
        std::lock_guard<std::mutex> lock(pool->mu);
        if (pool->current == nullptr && start_helpers(pool, threads - 1)) {
            pool->current = team;
            team->pool = pool;
            pool->published.fetch_add(1, std::memory_order_release);
        }
    }
    t_team = team;
    return team;
}

// End the pool call `handle` (from hector_pool_begin on this thread; null: nothing): chunks
// still queued (none, when the compiled code joined each group it dispatched) run here first.
void hector_pool_end(void* handle) {
    Team* team = static_cast<Team*>(handle);
    if (team == nullptr) return;
    Task task;
    while (pop(team, &task)) task.resume(task.handle);
    t_team = nullptr;
    team->done.store(true, std::memory_order_release);
    announce(team);
    if (Pool* pool = team->pool) {
        std::lock_guard<std::mutex> lock(pool->mu);
        if (pool->current == team) pool->current = nullptr;
    }
    release(team);
}

// Set the spin windows (nanoseconds; 0: sleep, or block, at once; negative: the default): a
// pool helper's after a call, the calling thread's at a join.
void hector_pool_set_spin(int64_t idle_ns, int64_t join_ns) {
    g_idle_spin_ns.store(idle_ns < 0 ? IDLE_SPIN_NS : idle_ns, std::memory_order_relaxed);
    g_join_spin_ns.store(join_ns < 0 ? JOIN_SPIN_NS : join_ns, std::memory_order_relaxed);
}

// Times a pool helper has gone to sleep between calls since the process started.
uint64_t hector_pool_naps() { return g_pool_naps.load(std::memory_order_relaxed); }

// Chunks pool calls have queued since the process started, and of those the helpers ran.
uint64_t hector_pool_queued() { return g_pool_queued.load(std::memory_order_relaxed); }
uint64_t hector_pool_helped() { return g_pool_helped.load(std::memory_order_relaxed); }

// Helper threads the pool of this process has started (a forked child starts its own).
int hector_pool_helpers() {
    Pool* pool = pool_of_process();
    std::lock_guard<std::mutex> lock(pool->mu);
    return pool->helpers;
}

}  // extern "C"
