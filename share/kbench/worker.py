# worker.py: the process that kbench-eval starts for one candidate (see kbench-eval(1)).
#
# It talks JSON Lines over two pipes that kbench-eval hands it (--in FD, --out FD), never over
# stdin/stdout: stdout and stderr are captured by kbench-eval into eval.log. Life of a worker:
#   1. import torch, write {"ready": true, "torch": ..., "device": ...} (with --probe also
#      "arch", "gpus" and "gpu" (gpu_facts): the one worker that looks at every GPU)
#   2. read one job {"mode": "build" | "run" | "pch" | "names", ...}
#   3. write one result {"nonce": ..., "eval": {...}} and exit (a build's also with
#      "pch_want" and "names_want", its requests to the makers, where it has some).
# "build" executes the candidate once so that load_inline compiles it into the build cache
# (TORCH_EXTENSIONS_DIR, set by kbench-eval per source hash); "pch" and "names" are makers,
# which run no candidate's code: they check a build's request and make the precompiled
# header (make_pch) or the lean builds' names (make_names) it asked for, the only writers of
# the cache's pch/ and lean/; "run" follows KernelBench's
# protocol: seeded init, correctness trials on fresh seeded inputs, then timing of both the
# reference and the candidate under the same conditions, with the defences of SPEC section 8;
# the reference runs whole (its outputs, sealed, and its timing) before the candidate's code.
import json
import math
import os
import random
import re
import sys
import threading
import time
import traceback

ERR_NO = None


def parse_args(argv):
    fin, fout = 3, 4
    i = 1
    while i < len(argv):
        if argv[i] == "--in":
            fin = int(argv[i + 1])
            i += 1
        elif argv[i] == "--out":
            fout = int(argv[i + 1])
            i += 1
        i += 1
    return fin, fout


def parseable(o):
    """o with its strings made such that kbench-eval's JSON parser takes them (a line it
    refuses loses the verdict): a NUL as U+FFFD, a lone surrogate (text a candidate made)
    as "?"."""
    if isinstance(o, str):
        return o.replace("\0", "\ufffd").encode("utf-8", "replace").decode()
    if isinstance(o, dict):
        return {parseable(k): parseable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [parseable(v) for v in o]
    return o


class Channel:
    """The result pipe, kept on a high descriptor the candidate is not told about."""

    def __init__(self, fd):
        self.fd = os.dup2(fd, 1000) if fd != 1000 else fd
        if self.fd != fd:
            os.close(fd)
        os.set_inheritable(self.fd, False)

    def send(self, obj):
        data = (json.dumps(parseable(obj), allow_nan=False, default=str) + "\n").encode()
        while data:
            n = os.write(self.fd, data)
            data = data[n:]


def read_job(fd):
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        chunks.append(b)
        if b.endswith(b"\n"):
            break
    os.close(fd)
    return json.loads(b"".join(chunks).decode())


def tail(msg, n=400):
    msg = str(msg).strip().replace("\n", " | ")
    return msg if len(msg) <= n else msg[: n - 3] + "..."


# a compiler's error line: nvcc's front end (file(line): error: ...), GCC (file:l:c: error:),
# nvcc's driver (nvcc error   : ...)
FIRST_ERROR = re.compile(r"^.*?\berror\b(?: #[\w-]+)?\s*:.*$", re.M)


LINK_ERROR = re.compile(r"^.*undefined reference to.*$", re.M)


def first_error(msg):
    """The first compiler error in a build's output (the later ones may follow from it: a
    missing ";" leaves names undefined), its file named without the directory; for a failed
    link, the first undefined reference rather than the linker's exit status; None if none."""
    m = FIRST_ERROR.search(msg)
    if m and "ld returned" in m.group(0):
        m = LINK_ERROR.search(msg) or m
    return re.sub(r"^\S*/", "", m.group(0).strip()) if m else None


def finite(x):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return x


# ---------------------------------------------------------------- the candidate and the reference

def exec_source(src, name):
    """Execute a Python source as a fresh module namespace."""
    ns = {"__name__": name, "__builtins__": __builtins__}
    code = compile(src, "<%s>" % name, "exec")
    exec(code, ns)
    return ns


def set_seed(torch, seed, cuda):
    """KernelBench's seeding (torch's generators), and Python's and NumPy's where loaded:
    the inputs are drawn again for the candidate (do_run), so a get_inputs() that draws from
    them must draw the same."""
    verdict_fn(torch, "manual_seed")(seed)
    if cuda:
        verdict_fn(torch, "cuda.manual_seed")(seed)
    RANDOM_SEED(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed)


def to_device(torch, xs, dev):
    """xs with its tensors moved to dev (torch's methods as imported: verdict_fn)."""
    to, tensor = verdict_fn(torch, "Tensor.to"), verdict_fn(torch, "Tensor")
    return [to(x, dev) if isinstance(x, tensor) else x for x in xs]


def clone_all(torch, xs):
    """xs with its tensors copied (a candidate's Tensor.clone returning its own tensor would
    let it write its inputs unseen)."""
    clone, tensor = verdict_fn(torch, "Tensor.clone"), verdict_fn(torch, "Tensor")
    return [clone(x) if isinstance(x, tensor) else x for x in xs]


def flatten(torch, out):
    """The output as a list of tensors (a tensor, or a tuple/list of them); None if other."""
    tensor = verdict_fn(torch, "Tensor")
    if isinstance(out, tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            if not isinstance(o, tensor):
                return None
            res.append(o)
        return res
    return None


class Verdict(Exception):
    def __init__(self, error, message):
        Exception.__init__(self, message)
        self.error = error
        self.message = message


def is_cuda_error(e):
    s = str(e)
    return ("CUDA error" in s or "cudaError" in s or "illegal memory access" in s
            or "device-side assert" in s or type(e).__name__ in ("AcceleratorError", "CudaError"))


def errors(torch, a, b):
    """(max_abs, max_rel): the largest differences of output b from the reference a, in
    double precision (complex128 for complex outputs, so the imaginary part counts), relative
    to max(|a|, 1e-6). Equal elements differ by 0 (an infinity matched too, as allclose
    takes it); a NaN in either, or an infinity unmatched, by inf. torch's functions as
    imported (verdict_fn): a candidate's Tensor.__sub__ does not say 0."""
    def v(name):
        return verdict_fn(torch, name)
    wide = v("complex128") if v("Tensor.is_complex")(a) else v("float64")
    a64 = v("Tensor.to")(v("Tensor.detach")(a), wide)
    b64 = v("Tensor.to")(v("Tensor.detach")(b), wide)
    diff = v("abs")(v("sub")(a64, b64))
    diff = v("where")(v("eq")(a64, b64), v("zeros_like")(diff), diff)
    rel = v("div")(diff, v("clamp_min")(v("abs")(a64), 1e-6))
    # NaN here is a NaN given, inf - inf or inf / inf: an unmatched infinity
    diff = v("masked_fill")(diff, v("isnan")(diff), math.inf)
    rel = v("masked_fill")(rel, v("isnan")(rel), math.inf)
    return float(v("Tensor.item")(v("max")(diff))), float(v("Tensor.item")(v("max")(rel)))


# torch's comparisons, tensor classes, the functions and tensor methods the verdict, the inputs'
# digests, the sealing and the seeding use, as they were when the worker imported torch, before
# any candidate's code ran (keep_torch): a candidate that rebinds torch.allclose, torch.equal,
# torch.Tensor, torch.Tensor.numel or Tensor.__sub__ (deceive-check's torch-patch) changes
# neither the verdict nor the errors reported
VERDICT_FNS = {}
VERDICT_NAMES = ("allclose", "equal", "Tensor", "sum", "abs", "sub", "where", "eq", "div",
                 "clamp_min", "isnan", "masked_fill", "max", "zeros_like", "randint",
                 "Generator", "manual_seed", "cuda.manual_seed", "float64", "complex128",
                 "uint8", "int64", "contiguous_format", "Tensor.detach", "Tensor.to",
                 "Tensor.item", "Tensor.numel", "Tensor.is_floating_point", "Tensor.is_complex",
                 "Tensor.contiguous", "Tensor.reshape",
                 "Tensor.view", "Tensor.tolist", "Tensor.__getitem__", "Tensor.bitwise_xor_",
                 "Tensor.clone", "Tensor.shape", "Tensor.dtype", "Tensor.device")
RANDOM_SEED = random.seed


def verdict_fn(torch, name):
    """VERDICT_FNS[name], or (a test that imports the worker) torch's, dotted name read."""
    f = VERDICT_FNS.get(name)
    if f is None:
        f = torch
        for part in name.split("."):
            f = getattr(f, part)
    return f


def keep_torch(torch):
    """VERDICT_FNS and KEPT's torch.cuda functions, from torch as imported (before any job)."""
    VERDICT_FNS.update(Parameter=torch.nn.Parameter)
    for name in VERDICT_NAMES:
        VERDICT_FNS[name] = verdict_fn(torch, name)
    keep_cuda(torch)


def tensor_attr(torch, t, name):
    """Tensor t's shape, dtype or device, read through the descriptor torch's class had."""
    return verdict_fn(torch, "Tensor." + name).__get__(t)


def plain(torch, t):
    """Is t a tensor of torch's own classes? A subclass's __torch_function__ (or
    __torch_dispatch__) answers the comparisons made with it, so a candidate's could say
    allclose of anything."""
    return type(t) in (verdict_fn(torch, "Tensor"), VERDICT_FNS.get("Parameter"))


def same_tensor(torch, x, y):
    """Does y hold what x holds, exactly (a NaN where x has one counts as the same: it is
    unequal to itself)? Only torch's functions as imported: a candidate's Tensor.__eq__ does
    not answer."""
    if verdict_fn(torch, "equal")(x, y):
        return True
    return inexact(torch, x) and \
        bool(verdict_fn(torch, "allclose")(x, y, rtol=0, atol=0, equal_nan=True))


def inexact(torch, t):
    """Is tensor t floating point or complex (compared within tolerances)?"""
    return verdict_fn(torch, "Tensor.is_floating_point")(t) or \
        verdict_fn(torch, "Tensor.is_complex")(t)


def compare(torch, ref, new, atol, rtol, rtol_only, stats):
    """Raise Verdict on a shape/dtype/device/value difference; update max_abs/max_rel in
    stats."""
    r = flatten(torch, ref)     # (do_run has checked it)
    c = flatten(torch, new)
    if c is None:
        raise Verdict("shape_mismatch", "output is %s, want a tensor" % type(new).__name__)
    if len(r) != len(c):
        raise Verdict("shape_mismatch", "output has %d tensors, want %d" % (len(c), len(r)))
    for i, b in enumerate(c):   # before any attribute of it is read: it answers them too
        if not plain(torch, b):
            raise Verdict("mismatch", "output %d is a %s, a subclass of torch.Tensor that "
                          "can answer the comparison itself; want a plain tensor"
                          % (i, type(b).__name__))
    def at(t, name):
        return tensor_attr(torch, t, name)
    numel = verdict_fn(torch, "Tensor.numel")
    for i, (a, b) in enumerate(zip(r, c)):
        if tuple(at(a, "shape")) != tuple(at(b, "shape")):
            raise Verdict("shape_mismatch", "output shape %s, want %s"
                          % (list(at(b, "shape")), list(at(a, "shape"))))
        if at(a, "dtype") != at(b, "dtype"):
            raise Verdict("mismatch", "output dtype %s, want %s"
                          % (at(b, "dtype"), at(a, "dtype")))
        if at(b, "device") != at(a, "device"):    # KernelBench's allclose refuses the pair
            raise Verdict("mismatch", "output %d is on device %s, want %s"
                          % (i, at(b, "device"), at(a, "device")))
        if numel(a):
            mabs, mrel = errors(torch, a, b)
            stats["max_abs_err"] = max(stats["max_abs_err"], mabs)
            stats["max_rel_err"] = max(stats["max_rel_err"], mrel)
        if not inexact(torch, a):
            if not verdict_fn(torch, "equal")(a, b):
                raise Verdict("mismatch", "output %d differs (exact comparison of %s)"
                              % (i, at(a, "dtype")))
            continue
        if rtol_only:
            ok = numel(a) == 0 or stats["max_rel_err"] <= rtol
        else:
            ok = bool(verdict_fn(torch, "allclose")(a, b, atol=atol, rtol=rtol))
        if not ok:
            raise Verdict("mismatch", "output %d: max_abs_err %.4g, max_rel_err %.4g"
                          % (i, stats["max_abs_err"], stats["max_rel_err"]))


def same_inputs(torch, a, b):
    """Whether the tensors of inputs b (the candidate's copy) still hold what those of a
    hold, as tensors of the same class (one turned into a subclass answers for itself)."""
    for x, y in zip(a, b):
        if isinstance(x, verdict_fn(torch, "Tensor")):
            if type(y) is not type(x) or tuple(tensor_attr(torch, x, "shape")) != \
                    tuple(tensor_attr(torch, y, "shape")) or not same_tensor(torch, x, y):
                return False
    return True


def input_digest(torch, xs):
    """What inputs xs hold, to tell whether get_inputs() drew the same again: per tensor its
    class, dtype, shape, device, the sum of its bytes and 64 of them spread over it (one pass
    over it, exact, in any order); other values by repr."""
    def v(name):
        return verdict_fn(torch, name)
    out = []
    for x in xs:
        if isinstance(x, v("Tensor")):
            b = tensor_bytes(torch, v("Tensor.detach")(x))
            step = max(1, v("Tensor.numel")(b) // 64)
            some = v("Tensor.__getitem__")(b, slice(None, None, step))
            out.append((type(x).__name__, str(tensor_attr(torch, x, "dtype")),
                        tuple(tensor_attr(torch, x, "shape")),
                        str(tensor_attr(torch, x, "device")),
                        int(v("Tensor.item")(v("sum")(b, dtype=v("int64")))),
                        bytes(v("Tensor.tolist")(some)[:64])))
        else:
            out.append(repr(x))
    return out


def tensor_bytes(torch, t):
    """Tensor t's bytes, a flat uint8 view (of t itself where it is contiguous, else of a
    copy)."""
    def v(name):
        return verdict_fn(torch, name)
    return v("Tensor.view")(v("Tensor.reshape")(v("Tensor.contiguous")(t), -1), v("uint8"))


class Sealed:
    """The reference's outputs of the correctness trials, made before the candidate's code
    runs (a candidate that rebinds torch's functions cannot change them, nor slow the
    reference's timing) and kept until each is compared: each a copy of its own (a reference
    may return a buffer it fills again) XORed with random bytes, a key of at most KEY bytes
    drawn again from a seed to open it. While the candidate runs, no tensor in the worker
    holds the reference's output for it to find (in the worker's frames, or among gc's
    objects) and return as its own: it would have to take the worker apart
    (deceive-check's introspection rule flags the frame and gc reads it takes)."""
    KEY = 1 << 20

    def __init__(self, torch):
        self.torch = torch
        self.seed = int.from_bytes(os.urandom(7), "little")
        self.keys = 0       # the keys drawn
        self.trials = []    # per trial: [(copy, its key's number)], None once opened

    def xor(self, t, n):
        """XOR tensor t's bytes, in place, with key number n (a second time undoes it)."""
        torch = self.torch

        def v(name):
            return verdict_fn(torch, name)
        b = tensor_bytes(torch, t)     # t is contiguous: a view of it
        size = v("Tensor.numel")(b)
        if not size:
            return
        dev = tensor_attr(torch, t, "device")
        g = v("Generator")(device=dev)
        g.manual_seed(self.seed + n)
        key = min(size, self.KEY)
        k = v("randint")(0, 256, (key,), dtype=v("uint8"), device=dev, generator=g)
        part = v("Tensor.__getitem__")
        whole = size - size % key
        v("Tensor.bitwise_xor_")(v("Tensor.view")(part(b, slice(0, whole)), -1, key), k)
        if whole < size:
            v("Tensor.bitwise_xor_")(part(b, slice(whole, None)), part(k, slice(0, size - whole)))

    def add(self, outs):
        """Keep one trial's outputs (flatten's list) sealed."""
        kept = []
        for t in outs:
            c = verdict_fn(self.torch, "Tensor.clone")(
                verdict_fn(self.torch, "Tensor.detach")(t),
                memory_format=verdict_fn(self.torch, "contiguous_format"))
            self.xor(c, self.keys)
            kept.append((c, self.keys))
            self.keys += 1
        self.trials.append(kept)

    def open(self, i):
        """Trial i's outputs as the reference returned them (a list), no longer kept."""
        kept, self.trials[i] = self.trials[i], None
        for c, n in kept:
            self.xor(c, n)
        return [c for c, _ in kept]

    def kept(self, i):
        """Trial i's sealed copies (what poison sizes its junk by on the CPU)."""
        return [c for c, _ in self.trials[i]]


def poison(torch, cuda, outs):
    """Overwrite memory the reference freed, so uninitialised output cannot hold its result."""
    if cuda:
        torch.cuda.synchronize()
        reserved = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        big = max(reserved, 1 << 22)
        try:
            t = torch.empty(big, dtype=torch.uint8, device="cuda")
            t.fill_(0xFF)   # NaN in every float format
            small = [torch.empty(1 << 19, dtype=torch.uint8, device="cuda").fill_(0xFF)
                     for _ in range(32)]
            torch.cuda.synchronize()
            del t, small
        except RuntimeError:
            pass
    else:
        junk = []
        for o in outs:
            for _ in range(4):
                junk.append(torch.full_like(o, float("nan")) if o.is_floating_point()
                            else torch.full_like(o, -1))
        del junk


# Timing: how long a thread may go on after forward returned (one it started still
# alive, one of the candidate's still running) before that is the candidate's verdict
THREAD_BOUND_S = 2.0

# Timing: the CPU time the candidate's threads, together, may use between the timed calls
# of one measure (from the look after a call that found them idle to the next call, and
# after the last) beyond what they use when idle: ESCAPE_MIN_S and ESCAPE_FRAC of the time
# between them. What they use when idle is measured after the last call: windows of
# ESCAPE_WINDOW_S until two in a row used about the same (within ESCAPE_ALIKE of the larger,
# and ESCAPE_WINDOW_S x 0.5% of a core), at most ESCAPE_IDLE_RATE of a core each, none of
# their threads running (state R) where they end having had ESCAPE_BUSY of a core in the
# window (test 061's thread working on a CPU shared with two busy processes had 28-32%; 64
# threads in q.get(timeout=0.001) on 2 CPUs, 3 to 56 of them in state R at each reading,
# 2.6% each at most, 48 in q.get(timeout=0.0005) on one, 0 to 48, 3%: taken for working,
# such a pool was a runtime_error, test 062); not so
# within THREAD_BOUND_S is the candidate's verdict (still working). Idle pools cost what
# their wake-ups do: four threads in q.get(timeout=0.001) used 12-15% of a core between
# the calls on an H200's host with 8 workers running (a bound without the idle rate failed
# 13 of 24 such honest records); Python threads sharing the GIL work on one core together,
# so the bound is on their sum: a pool that sleeps while the look is made and works after
# it got 35-80% of the time between calls. ESCAPE_SETTLE_S = 0: no windows (idle rate 0),
# the time between the calls alone (tests)
ESCAPE_MIN_S = 1e-3
ESCAPE_FRAC = 0.1
ESCAPE_SETTLE_S = 0.04
ESCAPE_WINDOW_S = 0.02
ESCAPE_ALIKE = 0.25
ESCAPE_IDLE_RATE = 0.5
ESCAPE_BUSY = 0.1

# Timing, cuda: the device is idle when a timed call ends (cuda_call synchronised it and
# the look found the candidate's threads idle), so a device-wide synchronisation between
# two calls (before the L2 flush is queued) that waits, waits for GPU work the candidate's
# threads queued after the look (a pool thread asleep at the look that then queues a 30 ms
# kernel uses microseconds of CPU time). One with nothing queued took 4.6 us (median), 22 us
# (99.9th percentile) on an H200 (bench/kbench-gpu-escape.sh, session 42; with four idle
# threads beside it up to 0.4 ms, 0.3 ms at most beyond GPU_IDLE_S in 150 of them): what
# each waits beyond GPU_IDLE_S is added up, under the
# bound of the CPU time. After the last call the idle rate's windows are slept in steps
# of GPU_POLL_S, each followed by such a synchronisation, so that work the device does
# then is seen too (work it finishes before any synchronisation finds it pending is not)
GPU_IDLE_S = 1e-4
GPU_POLL_S = 1e-3


class KEPT:
    """What timing calls, as it was when the worker started, before any candidate's code
    ran: a candidate that rebinds time.perf_counter (or time.sleep, time.clock_gettime_ns,
    os.listdir and os.read, which list and read the threads), or torch.cuda's synchronize,
    Event, its methods or current_stream (keep_cuda), does not change its own times nor hide
    its threads (deceive-check's timing-patch flags the rebinding where it can see it). What
    these call in turn is not kept (torch.cuda.synchronize's torch._C)."""
    perf = time.perf_counter
    sleep = time.sleep
    clock_ns = time.clock_gettime_ns
    listdir = os.listdir
    open = os.open
    read = os.read
    close = os.close
    sync = Event = record = esync = elapsed = stream = None


def keep_cuda(torch):
    """KEPT's torch.cuda functions, from torch as imported (before any job)."""
    c = torch.cuda
    KEPT.sync, KEPT.Event, KEPT.stream = c.synchronize, c.Event, c.current_stream
    KEPT.record, KEPT.esync, KEPT.elapsed = c.Event.record, c.Event.synchronize, \
        c.Event.elapsed_time


def kept_record(e):
    """Record event e now on the current stream (KEPT's functions)."""
    KEPT.record(e, KEPT.stream())


def task_ids():
    """The ids of this process's threads (none where /proc cannot be read)."""
    try:
        return {int(t) for t in KEPT.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return set()


def tasks(ids):
    """{thread id: its state letter in /proc (b"R" running)} of the threads ids of this
    process; a thread gone since it was listed is left out."""
    out = {}
    for t in ids:
        try:
            fd = KEPT.open("/proc/self/task/%d/stat" % t, os.O_RDONLY)
        except OSError:
            continue
        try:
            st = KEPT.read(fd, 512)
        except OSError:
            continue
        finally:
            KEPT.close(fd)
        i = st.rfind(b")")      # the name, in parentheses, may hold anything
        if i > 0:
            out[t] = st[i + 2:i + 3]
    return out


def cpu_ns(ids):
    """{thread id: the CPU time it has used, ns} of the threads ids of this process; a thread
    gone is left out. Linux's clock of thread t, as glibc's pthread_getcpuclockid makes it
    (the thread's id, complemented, shifted by 3, or the per-thread and scheduler bits), so
    that threads Python did not start are read too."""
    out = {}
    for t in ids:
        try:
            out[t] = KEPT.clock_ns((~t << 3) | 6)
        except OSError:
            continue
    return out


def cpu_clocks(ids):
    """(the CPU time this process has used, ns, every thread's, those gone too; cpu_ns(ids)).
    The threads' clocks are read first: reading a running thread's brings the kernel's count
    of its time up to date, which the process's clock alone leaves up to a tick behind for a
    thread running on another CPU (3 ms seen; after the threads', 20 us at most)."""
    threads = cpu_ns(ids)
    return KEPT.clock_ns(time.CLOCK_PROCESS_CPUTIME_ID), threads


def own_threads(torch, cuda):
    """The worker's threads before any candidate's code runs, torch's intra-op pool among
    them (started here by an element-wise op big enough to be split and a matrix product, for
    BLAS's): threads that spin for a while after each op, which timing neither waits for nor
    counts. On cuda the CUDA runtime's too, started here by its first work and timing event
    where the reference made none (a model without parameters): its event handler, taken
    for the candidate's, was seen running after a call and made that call 10 ms long."""
    with torch.no_grad():
        torch.ones(1 << 18).add_(1)
        a = torch.ones(256, 256)
        a @ a
        if cuda:
            a = a.cuda()
            a @ a
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            e.synchronize()
            torch.cuda.synchronize()
    return task_ids()


def gpu_escaped(waits):
    """The GPU work, s, that device-wide synchronisations made between timed calls waited
    for, from their waits (s): what each waited beyond GPU_IDLE_S, its cost with nothing
    queued."""
    return sum(max(0.0, w - GPU_IDLE_S) for w in waits)


class Timer:
    def __init__(self, torch, cuda, flush_l2, own=()):
        self.torch = torch
        self.cuda = cuda
        self.flush = None
        # torch's threads and the caller's (the timing runs on the thread that makes the
        # Timer): what a look never waits for
        self.mine = set(own) | {threading.get_native_id()}
        self.seen = None    # the threads the last look saw
        # [when, the threads to read, cpu_clocks of them]: at the first look after the last
        # call that found the candidate's threads idle, from when on what they do is not
        # timed (the threads: the worker's and the candidate's then; none where the
        # candidate had none: nothing of its own to run); None when gap() has taken it.
        # On cuda the clocks are read once the call's end event is recorded (clocked): a
        # look that found work is inside the call's time, and every thread's clock (16 of
        # torch's pool on an H200's host) is no part of it. relu_pool_idle's mean there,
        # median of 9 records: 0.181 ms (clocks not read), 0.185 (read at the look), 0.170
        # (read after): within the spread between rounds (session 43)
        self.mark = None
        self.gaps = []      # (mark, cpu_clocks at the next call, when) of this measure's
        self.waits = []     # cuda: what the synchronisations between the calls waited, s
        if cuda and flush_l2:
            # larger than any current L2 (H100: 50 MB, H200: 60 MB)
            self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def cpu_call(self, fn, inputs):
        """CPU: one call of fn, timed (ms) until the work it left to threads is done too."""
        before = self.seen if self.seen is not None else task_ids()    # as cuda_call
        self.gap()
        t0 = KEPT.perf()
        fn(*inputs)
        t1 = KEPT.perf()
        return (self.settle(before, t1) - t0) * 1e3

    def cuda_call(self, fn, inputs):
        """CUDA: one call of fn, timed (ms) between two events, the device synchronised
        before the end one (so work moved to a side stream is timed too), and again after
        any work the call left to threads (settle), looked for once the end event has
        passed, so the look is not timed (it still made the next call of a 16 x 96 ReLU
        about 0.3 us longer on an H200; looking while the end event was queued, 6 us)."""
        KEPT.sync()
        # the threads there before: those the last look saw (nothing starts threads
        # between two calls), so that no listing runs just before the call (one made a
        # ReLU's time 0.8 us longer on an H200)
        before = self.seen if self.seen is not None else task_ids()
        self.gap()
        start = KEPT.Event(enable_timing=True)
        end = KEPT.Event(enable_timing=True)
        kept_record(start)
        fn(*inputs)
        KEPT.sync()
        kept_record(end)
        KEPT.esync(end)
        t1 = KEPT.perf()
        # one look: a thread the call woke has run during the synchronisations (and a
        # sleep between calls made the next one slower: a ReLU's 0.025 ms took 0.04-0.09)
        if self.settle(before, t1, 1) > t1:
            # a thread the call started, or one of the candidate's, went on working: what
            # it queued is done by this synchronisation, and the call ends here
            KEPT.sync()
            end = KEPT.Event(enable_timing=True)
            kept_record(end)
            KEPT.esync(end)
        self.clocked()
        return KEPT.elapsed(start, end)

    def settle(self, before, t1, looks=2):
        """When the work a call that returned at t1 left behind was done: every thread the
        call started has ended, and no other thread but torch's own and the
        caller is running (state R; a thread seen idle `looks` times, a sleep apart, is
        taken as idle: one woken by a call that just returned is running by the second
        look). t1 when there was no such work: the look is not timed. A thread still there
        THREAD_BOUND_S after t1 raises Verdict. The first look that finds them idle sets
        mark: what they do from there on is not timed (gap)."""
        idle = 0
        end = t1
        while True:
            self.seen = task_ids()
            others = self.seen - self.mine
            now = KEPT.perf()
            if not others:
                self.mark = [now, (), None]
                return end      # only torch's threads and the caller: nothing to wait for
            ts = tasks(others)  # only the others' states are read: a cheap look
            new = [t for t in ts if t not in before]
            busy = [t for t in ts if ts[t] == b"R"]
            if not new and not busy:
                if idle == 0:
                    # the worker's threads and the candidate's: all there; their clocks
                    # read now on the CPU (the call's time is end), on cuda once the end
                    # event is recorded (cuda_call)
                    self.mark = [now, tuple(self.seen), None]
                    if not self.cuda:
                        self.clocked()
                idle += 1
                if idle >= looks:
                    return end
            else:
                idle = 0
                end = now
                if now - t1 > THREAD_BOUND_S:
                    t = (new or busy)[0]
                    raise Verdict("runtime_error", "timing: thread %d %s %g s after forward "
                                  "returned" % (t, "that forward started is still alive"
                                                if new else "of the candidate's is still running",
                                                THREAD_BOUND_S))
            KEPT.sleep(1e-4)

    def gap(self):
        """Before a call, outside its time: the clocks of the threads mark read, kept with
        mark in gaps (others_ns makes them the candidate's CPU time between two calls, which
        settle took for no work). Nothing else: no listing, no sums just before a call."""
        if self.mark is None:
            return
        if self.mark[1]:
            self.clocked()
            self.gaps.append((self.mark, cpu_clocks(self.mark[1]), KEPT.perf()))
        self.mark = None

    def others_ns(self, was, now):
        """The CPU time, ns, that the threads but the worker's own used from cpu_clocks was
        to now: the process's clock, which keeps the time of threads gone (a thread of the
        candidate's that worked and returned; one started and gone in between), less the
        worker's threads' (torch's pool spins after ops; the caller looks). A thread of the
        worker's gone in between: what it used since was is the candidate's."""
        mine = was[1]
        return now[0] - was[0] - sum(ns - mine[t] for t, ns in now[1].items()
                                     if t in self.mine and t in mine)

    def clocked(self):
        """mark's clocks read, where it has threads to read and they are not yet: after
        the call's time is taken."""
        if self.mark is not None and self.mark[1] and self.mark[2] is None:
            self.mark[2] = cpu_clocks(self.mark[1])

    def gpu_wait(self):
        """cuda, between two timed calls and in the settle after the last, where the last
        look saw a thread of the candidate's: a device-wide synchronisation, its wait added
        to waits (the device was idle when the call ended: what it waits for was queued
        since, by the candidate's threads). Outside the timed span."""
        if self.mark is None or not self.mark[1]:
            return
        t0 = KEPT.perf()
        KEPT.sync()
        self.waits.append(KEPT.perf() - t0)

    def idle_rate(self):
        """After the last call, where the last look saw a thread of the candidate's: the CPU
        time (ns) and wall time (s) they use from that look on, windows of ESCAPE_WINDOW_S
        (on cuda slept in steps of GPU_POLL_S, each with gpu_wait) until two in a row are
        alike, no thread of theirs running at the readings that end them, and their rate
        then (CPU s a s): (ns, s, rate). Raises Verdict where they
        are not so within THREAD_BOUND_S. (0, 0, 0) where there is nothing to wait for."""
        if self.mark is None or not self.mark[1] or ESCAPE_SETTLE_S <= 0:
            return 0, 0.0, 0.0
        self.clocked()
        at, _, then = self.mark
        last, prev, base, was = at, None, 0, then[1]
        while True:
            if self.cuda:
                for _ in range(max(1, round(ESCAPE_WINDOW_S / GPU_POLL_S))):
                    KEPT.sleep(GPU_POLL_S)
                    self.gpu_wait()
            else:
                KEPT.sleep(ESCAPE_WINDOW_S)
            # every thread read (the new too: its count brought up to date), those gone
            # in the process's clock
            ids = task_ids()
            clocks = cpu_clocks(ids)
            used = self.others_ns(then, clocks)
            now = KEPT.perf()
            win = (used - base, now - last)
            base, last = used, now
            # a thread of the candidate's running (state R: on a CPU or waiting for one)
            # that had ESCAPE_BUSY of a core in the window is working: a window that ends
            # with one is not idle, nor taken with the next (one working on a CPU shared
            # with two busy processes got a third of it, two windows alike); one in state R
            # with less is an idle one woken (of many in timed waits, some are at each)
            floor = ESCAPE_BUSY * win[1] * 1e9
            working = any(clocks[1].get(t, 0) - was.get(t, 0) >= floor
                          for t, st in tasks(ids - self.mine).items() if st == b"R")
            was = clocks[1]
            if prev is not None and not working and now - at >= ESCAPE_SETTLE_S:
                lo, hi = sorted((prev[0] / prev[1] / 1e9, win[0] / win[1] / 1e9))
                if hi <= ESCAPE_IDLE_RATE and hi - lo <= ESCAPE_ALIKE * hi + 0.005:
                    return used, now - at, (prev[0] + win[0]) / (prev[1] + win[1]) / 1e9
            prev = None if working else win
            if now - at > THREAD_BOUND_S:
                raise Verdict("runtime_error", "timing: the candidate's threads were still "
                              "working %g s after the last timed call (%.0f%% of a core in "
                              "the last %.3g ms)" % (THREAD_BOUND_S, 100 * win[0] / 1e9 /
                                                     win[1], win[1] * 1e3))

    def escaped(self):
        """After the last call of a measure: raise Verdict where the candidate's threads
        used more CPU time between the calls and after the last (idle_rate) than they use
        idle, by more than ESCAPE_MIN_S and ESCAPE_FRAC of that time (work not timed), or
        on cuda left more GPU work there than that bound (gpu_escaped)."""
        post_ns, post_s, rate = self.idle_rate()
        self.mark = None
        gap_ns = sum(self.others_ns(m[2], now) for m, now, _ in self.gaps)
        span = sum(t - m[0] for m, _, t in self.gaps) + post_s
        bound = ESCAPE_MIN_S + ESCAPE_FRAC * span
        ns = gap_ns + post_ns
        if ns - rate * span * 1e9 > bound * 1e9:
            raise Verdict("runtime_error", "timing: the candidate's threads worked %.3g ms "
                          "(CPU time) in the %.3g ms between timed calls and after the "
                          "last, %.3g ms beyond their idle rate, untimed"
                          % (ns / 1e6, span * 1e3, (ns - rate * span * 1e9) / 1e6))
        gpu = gpu_escaped(self.waits)
        if gpu > bound:
            raise Verdict("runtime_error", "timing: the candidate's threads left %.3g ms "
                          "of GPU work to the %.3g ms between timed calls, untimed"
                          % (gpu * 1e3, span * 1e3))

    def measure(self, fn, inputs, warmup, trials):
        torch = self.torch
        times = []
        with torch.no_grad():
            for _ in range(warmup):
                if self.cuda:
                    fn(*inputs)
                    KEPT.sync()
                else:
                    self.cpu_call(fn, inputs)
            self.mark = None    # the gaps counted: those between the timed calls
            self.gaps = []
            self.waits = []
            for _ in range(trials):
                if self.cuda:
                    self.gpu_wait()     # before the flush: its memset is the worker's work
                if self.flush is not None:
                    self.flush.zero_()
                if self.cuda:
                    times.append(self.cuda_call(fn, inputs))
                else:
                    times.append(self.cpu_call(fn, inputs))
            self.escaped()
        return times


def stats_of(times):
    n = len(times)
    s = sorted(times)
    mean = sum(times) / n
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    std = math.sqrt(sum((t - mean) ** 2 for t in times) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "median": med, "std": std, "min": s[0], "max": s[-1], "n": n}


def sig3(x):
    if x is None or x == 0 or not math.isfinite(x):
        return x
    return float("%.3g" % x)


# ---------------------------------------------------------------- modes

def cpu_only_extensions():
    """CPU mode: a CUDA extension is a compile error, whatever toolkit is installed."""
    import torch.utils.cpp_extension as ext
    orig = ext.load_inline

    def load_inline(*a, **k):
        if k.get("cuda_sources") or (len(a) > 2 and a[2]) or k.get("with_cuda"):
            raise RuntimeError("CUDA sources cannot be built in CPU mode (--device cpu)")
        return orig(*a, **k)
    ext.load_inline = load_inline


# load_inline's parameters in order (torch 1.13 .. 2.6; load_inline_args reads torch's own)
LOAD_INLINE_ARGS = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags",
                    "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                    "build_directory", "verbose", "with_cuda", "is_python_module",
                    "with_pytorch_error_handling", "keep_intermediates")


def load_inline_args(fn):
    """load_inline's parameters in order, from this torch's own function (torch 2.7 put
    sycl_sources fourth), else LOAD_INLINE_ARGS."""
    global LOAD_INLINE_ARGS
    import inspect
    try:
        p = inspect.signature(fn).parameters.values()
        names = tuple(x.name for x in p if x.kind == x.POSITIONAL_OR_KEYWORD)
        if names[:2] == ("name", "cpp_sources"):
            LOAD_INLINE_ARGS = names
    except (TypeError, ValueError):
        pass


def inline_call(a, k):
    """A load_inline call's arguments by name, from its positional and keyword ones."""
    call = dict(zip(LOAD_INLINE_ARGS, a))
    call.update(k)
    return call


def call_key(call):
    """The hash of a load_inline call's arguments, verbose aside (it changes no build)."""
    import hashlib
    return hashlib.sha256(repr(sorted((k, v) for k, v in call.items()
                                      if k != "verbose")).encode()).hexdigest()


def stamp_path(call, kind):
    """A stamp file of kbench-eval's in the build directory of call: NAME.kbench-KIND."""
    return os.path.join(ext_build_dir(call), "%s.kbench-%s" % (call.get("name"), kind))


def stamp_holds(path, key):
    """Whether the stamp at path holds key (a call's hash)."""
    try:
        with open(path) as f:
            return f.read().strip() == key
    except OSError:
        return False


def stamp_write(path, key):
    try:
        with open(path, "w") as f:
            f.write(key + "\n")
    except OSError:     # a stamp only saves work later
        pass


def ext_build_dir(call):
    """Where load_inline builds the extension of call (its arguments by name)."""
    return call.get("build_directory") or os.path.join(
        os.environ.get("TORCH_EXTENSIONS_DIR", os.getcwd()), str(call.get("name")))


def ext_cache():
    """load_inline through the build cache: a build that succeeded leaves a stamp holding the
    hash of its arguments beside the library; a later call with the same arguments imports
    that library instead of rebuilding (older torch rewrites the sources on every call, which
    makes ninja rebuild)."""
    import torch.utils.cpp_extension as ext
    orig = ext.load_inline
    load_inline_args(orig)

    def load_inline(*a, **k):
        call = inline_call(a, k)
        key = call_key(call)
        name = call.get("name")
        root = ext_build_dir(call)
        stamp = stamp_path(call, "stamp")
        if stamp_holds(stamp, key) and os.path.exists(os.path.join(root, "%s.so" % name)):
            try:
                return ext._import_module_from_library(name, root,
                                                       call.get("is_python_module", True))
            except Exception:
                pass
        mod = orig(*a, **k)
        stamp_write(stamp, key)
        return mod
    ext.load_inline = load_inline


def ninja_vars(build_dir, names):
    """The variables named of the build.ninja torch wrote in build_dir (its compile lines),
    ninja's $$ read as $; OSError where there is none."""
    v = {}
    with open(os.path.join(build_dir, "build.ninja")) as f:
        for line in f:
            name, eq, value = line.rstrip("\n").partition(" = ")
            if eq and name in names:
                v[name] = value.replace("$$", "$")
    return v


def pch_root(torch, pch_dir):
    """(header, ROOT): this torch's torch/extension.h (real path) and its directory in
    pch_dir, ROOT = PCH_DIR/<the header's path, size, mtime and torch's version>, so that an
    upgraded torch never meets an old header; None where torch has none."""
    import hashlib
    import torch.utils.cpp_extension as ext
    header = [os.path.join(d, "torch", "extension.h") for d in ext.include_paths()]
    header = [h for h in header if os.path.exists(h)]
    if not header:
        return None
    header = os.path.realpath(header[0])
    st = os.stat(header)
    ident = repr((torch.__version__, header, st.st_size, st.st_mtime_ns))
    return header, os.path.join(pch_dir, hashlib.sha256(ident.encode()).hexdigest()[:16])


PCH_ROOT = None     # ext_pch's ROOT in this process: left out of the lean names' line


def ext_pch(torch, pch_dir, want_new):
    """load_inline's C++ half (main.cpp: torch/extension.h, then the bindings) through a
    precompiled torch/extension.h. Every build gets -I ROOT (pch_root; there or not yet),
    where ROOT/torch/extension.h links to the real header (for a second #include of it) and
    ROOT/torch/extension.h.gch is a directory of precompiled headers, one per set of compiler
    flags: GCC takes one that is valid for its compilation, else reads the header, so the
    build's result is the same either way. After a build whose flags have none yet (and
    pch_out wants one), a build (want_new) asks for it: its compile line (pch_line) goes to
    kbench-eval as a pch_want request, and a maker job (make_pch), which runs no candidate's
    code, makes it; pch_dir is read-only to the build itself."""
    global PCH_ROOT
    import torch.utils.cpp_extension as ext
    hr = pch_root(torch, pch_dir)
    if hr is None:
        return
    root = PCH_ROOT = hr[1]
    orig = ext.load_inline

    def load_inline(*a, **k):
        call = inline_call(a, k)
        call["extra_include_paths"] = list(call.get("extra_include_paths") or []) + [root]
        mod = orig(**call)
        if want_new:
            try:
                line = pch_line(ext_build_dir(call))
                if line and pch_out(root, *line):
                    want("pch_want", {"cxx": line[0], "words": line[1]})
            except Exception:   # the header is a speed-up only, never the build's verdict
                traceback.print_exc()
        return mod
    ext.load_inline = load_inline


def pch_line(build_dir):
    """The C++ compile line of the build in build_dir (build.ninja: cxx, then cflags and
    post_cflags, less the extension's name) as (cxx, words), split; None where there is none."""
    import shlex
    try:
        v = ninja_vars(build_dir, ("cxx", "cflags", "post_cflags"))
    except OSError:
        return None
    if "cxx" not in v or "cflags" not in v:
        return None
    words = shlex.split(v["cflags"]) + shlex.split(v.get("post_cflags", ""))
    return shlex.split(v["cxx"]), [w for w in words
                                   if not w.startswith("-DTORCH_EXTENSION_NAME=")]


def pch_out(root, cxx, words):
    """Where the precompiled header for the compile line (cxx, words) goes, where one is
    wanted: none there yet, fewer than MAX_PCH there, and the compiler GCC; else None."""
    import hashlib
    import subprocess
    gdir = os.path.join(root, "torch", "extension.h.gch")
    key = hashlib.sha256(repr((" ".join(cxx), words)).encode()).hexdigest()[:24]
    out = os.path.join(gdir, key + ".gch")
    try:
        have = [f for f in os.listdir(gdir) if f.endswith(".gch")]
    except OSError:
        have = []
    if os.path.exists(out) or len(have) >= MAX_PCH:
        return None
    ver = subprocess.run(cxx + ["--version"], capture_output=True, text=True).stdout
    if not ver or "clang" in ver.lower():
        return None
    return out


def make_pch(torch, pch_dir, req, timeout):
    """The pch maker's job: the precompiled header a build asked for (req: {"cxx", "words"},
    pch_line's), made in ROOT/work where a check of the request (maker_refusal) and pch_out
    let it, and renamed into ROOT/torch/extension.h.gch in whole (one maker at a time per
    header, by a lock file there, which a maker that died leaves stale after PCH_LOCK_S;
    the next maker removes its half-written header), within timeout seconds less
    PCH_MARGIN_S. What came of it, in a word."""
    import subprocess
    t0 = time.perf_counter()
    why = maker_refusal("pch", req, pch_dir)
    if why:
        print("kbench-eval: pch request refused: %s" % why, flush=True)
        return "refused"
    hr = pch_root(torch, pch_dir)
    if hr is None:
        return "no header"
    header, root = hr
    gdir = os.path.join(root, "torch", "extension.h.gch")
    link = os.path.join(root, "torch", "extension.h")
    work = os.path.join(root, "work")   # locks and headers being written: GCC reads every
    os.makedirs(gdir, exist_ok=True)    # file of gdir as a header, so none of them go there
    os.makedirs(work, exist_ok=True)
    if os.path.realpath(link) != header:
        tmp = "%s.%d.tmp" % (link, os.getpid())
        os.symlink(header, tmp)
        os.replace(tmp, link)
    cxx, words = req["cxx"], req["words"]
    out = pch_out(root, cxx, words)
    if out is None:
        return "not wanted"
    key = os.path.basename(out)[:-4]
    left = timeout - (time.perf_counter() - t0) - PCH_MARGIN_S
    lock = os.path.join(work, key + ".lock")  # one maker at a time; a dead one's goes stale
    try:
        if time.time() - os.stat(lock).st_mtime > PCH_LOCK_S:
            os.unlink(lock)
    except OSError:
        pass
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except OSError:
        return "locked"
    for f in os.listdir(work):      # the lock is ours: a header of this key half-written
        if f.startswith(key + ".") and f.endswith(".gch"):   # is a dead maker's
            os.unlink(os.path.join(work, f))
    tmp = os.path.join(work, "%s.%d.gch" % (key, os.getpid()))
    try:
        r = subprocess.run(cxx + words + ["-x", "c++-header", header, "-o", tmp],
                           capture_output=True, text=True, timeout=max(left, 1))
        if r.returncode != 0:
            return "failed"
        os.replace(tmp, out)
        return "made"
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        for f in (tmp, lock):
            if os.path.exists(f):
                os.unlink(f)


MAX_PCH = 3           # precompiled headers kept (sets of C++ flags; 0.6 GB or more each)
PCH_LOCK_S = 900      # seconds after which a maker's lock is taken for dead
PCH_MARGIN_S = 15     # seconds of a maker's deadline the header's making leaves over


# ---------------------------------------------------------------- maker requests

WANT = {}     # a build's requests to the makers: pch_want and names_want, lists of requests
MAX_WANT = 4  # requests of a kind a build sends at most


def want(kind, req):
    """Ask kbench-eval for a maker job (kind: pch_want or names_want): sent beside the
    build's eval object, never in it."""
    reqs = WANT.setdefault(kind, [])
    if req not in reqs and len(reqs) < MAX_WANT:
        reqs.append(req)


# the words a maker takes besides the include directories (maker_refusal): GCC's and nvcc's
# -D/-U of a name with a simple value (torch writes -DPYBIND11_COMPILER_TYPE="_gcc"), -O,
# -std=, -f (not those that load or write files), -m, -W (not -Wl, -Wp, -Wa), -w, -g
SAFE_WORD = re.compile(
    r'-[DU][A-Za-z_]\w*(?:=(?:"[\w.+\-/$:]*"|[\w.+\-/$:]*))?|-O\w*|-std=[\w+]+|'
    r"-f(?!plugin|dump|profile|auto-profile|opt-info|save-optimization|record|stack-usage|"
    r"callgraph-info|create-profile)[\w+\-.,=]+|-m[\w+\-.,=]+|"
    r"-W(?![lpa],)[\w+\-=]*|-w|-g[0-3]?|-ggdb[0-3]?|-gdwarf(?:-\d)?")
# nvcc's own: the architectures, the language extensions, fast math, line info
NVCC_WORD = re.compile(
    r"--expt-relaxed-constexpr|--expt-extended-lambda|--extended-lambda|-?-use_fast_math|"
    r"-lineinfo|--generate-line-info|(?:-gencode|--generate-code)=ARCH|"
    r"(?:-arch|--gpu-architecture|-code|--gpu-code)=CODE(?:,CODE)*"
    .replace("ARCH", r"arch=compute_\d+[af]?,code=\[?CODE(?:,CODE)*\]?")
    .replace("CODE", r"(?:sm|compute|lto)_\d+[af]?"))
NVCC_ARCH_VALUE = re.compile(
    r"arch=compute_\d+[af]?,code=\[?CODE(?:,CODE)*\]?|CODE(?:,CODE)*"
    .replace("CODE", r"(?:sm|compute|lto)_\d+[af]?"))
INCLUDE_OPT = ("-I", "-isystem", "-iquote", "-idirafter")


def torch_nvcc():
    """The nvcc torch's builds use, where it has one."""
    import torch.utils.cpp_extension as ext
    try:
        return os.environ.get("PYTORCH_NVCC") or ext._join_cuda_home("bin", "nvcc")
    except Exception:
        return None


def include_dirs(pch_dir):
    """The directories a maker's compile line may name with -I and its kin: torch's own
    (include_paths), Python's, the CUDA toolkit's, the precompiled headers' (PCH_DIR/ROOT)."""
    import sysconfig
    import torch.utils.cpp_extension as ext
    dirs = []
    for arg in ((), (True,), ("cuda",)):
        try:
            dirs += list(ext.include_paths(*arg))
        except Exception:
            pass
    for get in (lambda: sysconfig.get_paths()["include"],
                lambda: sysconfig.get_path("include", scheme="posix_prefix"),
                lambda: ext._join_cuda_home("include")):
        try:
            dirs.append(get())
        except Exception:
            pass
    return {os.path.realpath(d) for d in dirs if d}, \
        os.path.realpath(pch_dir) if pch_dir else None


def maker_refusal(mode, req, pch_dir=None):
    """Why a maker's request (mode "pch": {"cxx", "words"}; "names": {"nvcc", "words"}) is
    refused, None where it is taken. The request comes from a build, which ran a candidate's
    code: the compiler must be the one torch uses (CXX, else c++; torch's nvcc, and as its
    host compiler only the -ccbin $CC that torch 2 writes where CC is set), and each
    word one that reads no file but torch's, Python's, CUDA's headers and the precompiled
    headers' directory, loads nothing and writes nothing but the compiler's output."""
    prog = req.get("cxx" if mode == "pch" else "nvcc") if isinstance(req, dict) else None
    words = req.get("words") if isinstance(req, dict) else None
    if not all(isinstance(x, list) and all(isinstance(w, str) for w in x)
               for x in (prog, words)):
        return "not a compiler and its words"
    if mode == "pch":
        import shlex
        ok = prog == shlex.split(os.environ.get("CXX", "c++"))
    else:
        ok = torch_nvcc() is not None and prog == [torch_nvcc()]
    if not ok:
        return "compiler %r is not torch's" % " ".join(prog)
    dirs, pch = include_dirs(pch_dir)
    i = 0
    while i < len(words):
        w, nxt = words[i], words[i + 1] if i + 1 < len(words) else None
        n = 0
        opt = next((o for o in INCLUDE_OPT if w.startswith(o)), None)
        if opt:
            path = w[len(opt):] or nxt
            n = 1 + (w == opt)
            real = os.path.realpath(path) if path else None
            if real not in dirs and not (pch and os.path.dirname(real or "") == pch):
                n = 0
        elif SAFE_WORD.fullmatch(w) or mode == "names" and NVCC_WORD.fullmatch(w):
            n = 1
        elif mode == "names" and w in ("-gencode", "--generate-code", "-arch",
                                       "--gpu-architecture", "-code", "--gpu-code"):
            n = 2 if nxt and NVCC_ARCH_VALUE.fullmatch(nxt) else 0
        elif mode == "names" and w in ("-ccbin", "--compiler-bindir"):
            n = 2 if nxt and nxt == os.environ.get("CC") else 0   # torch's: -ccbin $CC
        elif mode == "names" and w.split("=")[0] in ("-Xcompiler", "--compiler-options"):
            flags = w.partition("=")[2] if "=" in w else nxt
            n = 1 + ("=" not in w)
            if not flags or not all(SAFE_WORD.fullmatch(f) for f in flags.split(",")):
                n = 0
        if n == 0:
            return "word %r" % w
        i += n
    return None


# ---------------------------------------------------------------- lean CUDA builds

# a line that includes torch/extension.h (the C++ frontend, pybind11 and Python.h over
# torch/types.h: the CUDA half's three parses of it take about twice as long)
LEAN_INCLUDE = re.compile(r'^([ \t]*#[ \t]*include[ \t]*)[<"]torch/extension\.h[>"]', re.M)
# names that torch/extension.h declares and torch/types.h does not, macros too (Python's,
# torch/version.h's: an #if on one would take another branch without a word): a CUDA source
# naming one is built as written without trying
LEAN_NEEDS_FULL = re.compile(
    r"\b(?:py|pybind11|nn|optim|jit|data|serialize|fft|linalg|special|nested|sparse|python|"
    r"autograd|enumtype)::|\bPYBIND11|\bPy[A-Z]\w*|\bTHP\w*|\btorch::cuda\b|\b(?:NoGradGuard|"
    r"AutoGradMode|InferenceMode|manual_seed|set_num_threads|get_num_threads|TORCH_MODULE|"
    r"TORCH_ARG|torch::save|torch::load)\b|\bPy_\w*|\bPY_\w*|\bTORCH_VERSION\w*")
LEAN_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# what a missing declaration makes of a failed build's first error (nvcc's front end, then
# GCC's; an import's missing symbol, where no line says error; an #error on a macro the
# header would have defined): only these are tried again with torch/extension.h
LEAN_RETRY = re.compile(
    r"is undefined|has no member|must be a class or namespace name|incomplete type|"
    r"is not a template|no instance of|storage class or type specifier|was not declared|"
    r"is not a member of|has not been declared|does not name a|undefined symbol|"
    r"undefined reference|#error")
# the name such an error is about (nvcc's front end, then GCC's), qualified or not: a name
# that torch/extension.h's text adds nothing of over torch/types.h's is not tried again
LEAN_NAME = re.compile(
    r'identifier "([^"]+)" is undefined|has no member(?: \w+)? "([^"]+)"|'
    r'no instance of (?:overloaded function|function template|constructor) "([^"]+)"|'
    r'incomplete type "([^"]+)"|"([^"]+)" is not a template|'
    r"['\u2018]([^'\u2019]+)['\u2019] (?:was not declared|is not a member of|"
    r"has not been declared|does not name a|is not a template|in namespace)")
LEAN = {}    # the eval object's "lean": whether every CUDA build read torch/types.h


def lean_sources(src):
    """CUDA sources (a string or a list of them, what torch takes) with each #include of
    torch/extension.h read as torch/types.h, line for line; None when none includes it (or
    they are of another type), False when one names what only torch/extension.h declares
    (comments aside)."""
    parts = [src] if isinstance(src, str) else src
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts) \
            or not any(LEAN_INCLUDE.search(p) for p in parts):
        return None
    if any(LEAN_NEEDS_FULL.search(LEAN_COMMENT.sub(" ", p)) for p in parts):
        return False
    out = [LEAN_INCLUDE.sub(r"\1<torch/types.h>", p) for p in parts]
    return out[0] if isinstance(src, str) else out


def lean_name(msg):
    """The name a missing-declaration error is about, its last part without template or
    call arguments (torch::zeros<float> -> zeros); None when the message names none."""
    m = LEAN_NAME.search(msg)
    if not m:
        return None
    name = next(g for g in m.groups() if g is not None)
    prev = None
    while prev != name:     # template arguments, innermost first
        prev, name = name, re.sub(r"<[^<>]*>", "", name)
    name = re.sub(r"\(.*", "", name).split("::")[-1].strip()
    return name if re.fullmatch(r"[A-Za-z_]\w*", name) else None


FULL_NAMES = {}      # full_header_names' answers in this process, by key
MAX_NAMES = 64       # names files kept (one a compile line and torch; about 0.2 MB each)
NAMES_S = 120        # seconds the header runs may take, at most
# nvcc's architecture options, with their value in the word or in the next
ARCH_OPT = re.compile(r"^(?:-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code)"
                      r"(=.*)?$")


def names_line(build_dir):
    """The CUDA compile line of the build in build_dir (build.ninja: nvcc, then cuda_cflags
    and cuda_post_cflags) as (nvcc, words), split, less the architectures, the extension's
    name and the precompiled headers' directory; None where there is none."""
    import shlex
    try:
        v = ninja_vars(build_dir, ("nvcc", "cuda_cflags", "cuda_post_cflags"))
        words = shlex.split(v.get("cuda_cflags", "")) + shlex.split(v.get("cuda_post_cflags", ""))
        nvcc = shlex.split(v["nvcc"])
    except (OSError, KeyError, ValueError):
        return None
    kept, skip = [], False
    for w in words:
        m = ARCH_OPT.match(w)
        if skip or m or w.startswith("-DTORCH_EXTENSION_NAME=") or \
                (PCH_ROOT and w == "-I" + PCH_ROOT) or \
                (w.startswith("-I") and os.path.isdir(w[2:] + "/torch/extension.h.gch")):
            # (GCC would read a precompiled header's binary form in place of its text)
            skip = bool(m) and not m.group(1) and not skip
            continue
        kept.append(w)
    return nvcc, kept


def names_key(nvcc, words):
    """The key of the names of a CUDA compile line (names_line's), with this nvcc, torch
    and headers."""
    import hashlib
    import shutil

    def stat(path):
        try:
            st = os.stat(path)
            return (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        except (OSError, TypeError):
            return None
    import torch.utils.cpp_extension as ext
    headers = [stat(os.path.join(d, "torch", h)) for d in ext.include_paths()
               for h in ("extension.h", "types.h")]
    return hashlib.sha256(repr((nvcc, words, stat(shutil.which(nvcc[0]) if nvcc else None),
                                os.environ.get("NVCC_PREPEND_FLAGS"),
                                os.environ.get("NVCC_APPEND_FLAGS"), headers,
                                getattr(sys.modules.get("torch"), "__version__", None)))
                          .encode()).hexdigest()[:24]


def names_kept(names_dir, key):
    """The names kept in names_dir under key (KEY.names, a name a line); None where there
    are none, or not a whole file's."""
    path = os.path.join(names_dir, key + ".names") if names_dir else None
    if path and os.path.exists(path):
        try:
            with open(path, errors="replace") as f:
                names = set(f.read().split())
            if "pybind11" in names:     # else not a whole file: made again
                return names
        except OSError:
            pass
    return None


def full_header_names(build_dir, names_dir, deadline=None):
    """The names torch/extension.h adds to torch/types.h for the CUDA compile line of the
    build in build_dir (names_line), with this nvcc, torch and headers: those kept in
    names_dir (names_kept), else header_names' answer, which a build asks a names maker
    (make_names, a names_want request) to keep there for the next build with that line:
    names_dir is read-only to the build itself. None where it cannot be had (then it is
    asked again)."""
    line = names_line(build_dir)
    if line is None:
        return None
    nvcc, words = line
    key = names_key(nvcc, words)
    if key in FULL_NAMES:
        return FULL_NAMES[key]
    names = names_kept(names_dir, key)
    if names is not None:
        FULL_NAMES[key] = names
        return names
    # at most a quarter of what the build's deadline leaves: the build as written may follow
    budget = NAMES_S if deadline is None else min(NAMES_S, (deadline - time.time()) / 4)
    FULL_NAMES[key] = names = header_names(nvcc + words, budget) if budget > 0 else None
    if names_dir and names is not None:
        want("names_want", {"nvcc": nvcc, "words": words})
    return names


def make_names(req, names_dir, deadline, pch_dir=None):
    """The names maker's job: the names a build asked for (req: {"nvcc", "words"},
    names_line's), where a check of the request (maker_refusal) lets it and none are kept,
    made (header_names, by deadline) and kept in names_dir (KEY.names, a name a line; the
    MAX_NAMES newest). What came of it, in a word."""
    why = maker_refusal("names", req, pch_dir)
    if why:
        print("kbench-eval: names request refused: %s" % why, flush=True)
        return "refused"
    nvcc, words = req["nvcc"], req["words"]
    key = names_key(nvcc, words)
    if names_kept(names_dir, key) is not None:
        return "kept"
    names = header_names(nvcc + words, min(NAMES_S, deadline - time.time()))
    if names is None:
        return "failed"
    path = os.path.join(names_dir, key + ".names")
    os.makedirs(names_dir, exist_ok=True)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("\n".join(sorted(names)) + "\n")
    os.replace(tmp, path)
    files = sorted((os.path.join(names_dir, f) for f in os.listdir(names_dir)
                    if f.endswith(".names")), key=os.path.getmtime)
    for f in files[:-MAX_NAMES]:
        os.unlink(f)
    return "made"


def header_names(cmd, budget):
    """What torch/extension.h adds to torch/types.h under the compile command cmd: every
    identifier that the one's preprocessed text holds more often than the other's (whatever
    the full header declares, its declaration names), and every macro the one defines and
    the other does not, or otherwise; from the host pass (cudafe++'s view: __CUDA_ARCH__
    undefined) and the device pass (nvcc -E's) both. Eight runs of cmd -E at once (about 2 s
    on an H200 machine), killed with their children after budget seconds; None if one
    fails or the text is not the full header's (no pybind11)."""
    import collections
    import signal
    import subprocess
    import tempfile
    ident = re.compile(r"[A-Za-z_]\w*")
    end = time.time() + budget
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="kbench-lean-") as tmp:
            for h in ("types", "extension"):
                src = os.path.join(tmp, h + ".cu")
                with open(src, "w") as f:
                    f.write("#include <torch/%s.h>\n" % h)
                for kind, extra in (("i", []), ("m", ["-Xcompiler", "-dM"])):
                    for side, undef in (("device", []),
                                        ("host", ["-Xcompiler", "-U__CUDA_ARCH__"])):
                        out = os.path.join(tmp, "%s.%s.%s" % (h, side, kind))
                        runs.append((out, subprocess.Popen(
                            cmd + ["-E", "-x", "cu"] + extra + undef + [src, "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)))
            failed = False
            for out, p in runs:
                failed |= p.wait(timeout=max(end - time.time(), 0.01)) != 0
            if failed:
                return None
            text = {}
            for out, _ in runs:
                with open(out, errors="replace") as f:
                    text[os.path.basename(out)] = [l for l in f if not l.startswith("# ")]
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    finally:
        for _, p in runs:   # nvcc and the compilers it started, if still there
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
    names = set()
    for side in ("device", "host"):
        count = [collections.Counter(ident.findall("".join(text["%s.%s.i" % (h, side)])))
                 for h in ("types", "extension")]
        names.update(n for n, c in count[1].items() if c > count[0].get(n, 0))
        defined = set(text["types.%s.m" % side])
        names.update(l.split()[1].split("(")[0] for l in text["extension.%s.m" % side]
                     if l not in defined and l.startswith("#define "))
    return names if "pybind11" in names else None


def lean_mendable(first, build_dir, names_dir, deadline=None):
    """Whether a lean build's first error could be mended by torch/extension.h: an error
    of a missing name (LEAN_RETRY) that names none (an #error, a symbol at import) or names
    one the full header adds (full_header_names; or where those cannot be had, or anything
    goes wrong finding out). A name neither header has (a helper never written, a macro of
    another header, an API torch took away) fails the build as written too."""
    if not LEAN_RETRY.search(first):
        return False
    name = lean_name(first)
    if name is None:
        return True
    try:
        names = full_header_names(build_dir, names_dir, deadline)
    except Exception:       # never the candidate's verdict: built as written
        traceback.print_exc()
        return True
    if names is None or name in names:
        return True
    print("kbench-eval: torch/extension.h does not declare %s either: the lean build's "
          "error stands" % name, flush=True)
    return False


def ext_lean(names_dir=None, deadline=None):
    """load_inline with CUDA sources that include torch/extension.h (what KernelBench's
    candidates write) builds them first with torch/types.h in its place (what load_inline
    puts before every CUDA source anyway): the CUDA half, cudafe++, cicc and the host
    compiler each parsing the torch headers, takes about half as long. A lean build that
    fails on a missing name (LEAN_RETRY) is built again as written, and a mark in the build
    directory sends later calls with those arguments (the run phase) straight there; any
    other first error is the build's verdict, as it would have been with the full header. Only
    the include line differs, and sources that name the full header's own macros (an #if
    could test them) are built as written. A missing name that torch/extension.h does not
    add (lean_mendable; names_dir keeps the names it adds; the header runs take at most a
    quarter of what deadline leaves) is the lean build's verdict too.
    LEAN["lean"] says which way the builds went."""
    import torch.utils.cpp_extension as ext
    orig = ext.load_inline

    def build(call):   # torch adds to the lists it is given: each build gets its own
        return orig(**{k: list(v) if isinstance(v, list) else v for k, v in call.items()})

    def load_inline(*a, **k):
        call = inline_call(a, k)
        src = lean_sources(call.get("cuda_sources"))
        if src is None:
            return orig(**call)
        # verbose off: the failure's messages come back in the exception
        lean_call = dict(call, cuda_sources=src, verbose=False)
        key = call_key(lean_call)
        mark = stamp_path(call, "lean-failed")
        if src is False or stamp_holds(mark, key):
            LEAN["lean"] = False
            return build(call)
        try:
            mod = build(lean_call)
        except Exception as e:
            first = first_error(str(e)) or str(e)
            if not lean_mendable(first, ext_build_dir(call), names_dir, deadline):
                LEAN["lean"] = LEAN.get("lean", True)   # the lean build's verdict
                raise
            print("kbench-eval: the CUDA source with torch/types.h for torch/extension.h "
                  "failed on a name; building it as written", flush=True)
            stamp_write(mark, key)
            LEAN["lean"] = False
            # torch numbers a name's builds in a process (name_v1 for the second source):
            # the build as written takes the name itself, as the run phase's will
            versions = getattr(getattr(ext, "JIT_EXTENSION_VERSIONER", None), "entries", None)
            if isinstance(versions, dict):
                versions.pop(call.get("name"), None)
            return build(call)
        LEAN["lean"] = LEAN.get("lean", True)
        return mod
    ext.load_inline = load_inline


def load_candidate(torch, src, ev):
    """Execute the candidate; a failure here is compile_error (KernelBench: compiled=False)."""
    t0 = time.perf_counter()
    try:
        ns = exec_source(src, "kbench_candidate")
    except BaseException as e:  # SystemExit too: the candidate does not end the worker
        ev["build_s"] = round(time.perf_counter() - t0, 3)
        traceback.print_exc()
        msg = str(e)   # a failed build: its first error, not ninja's command lines
        first = first_error(msg) if msg.startswith("Error building extension") else None
        if first:
            msg = "%s: %s" % (msg.split(": ", 1)[0], first)
        raise Verdict("compile_error", "%s: %s" % (type(e).__name__, tail(msg)))
    ev["build_s"] = round(time.perf_counter() - t0, 3)
    ev["compiled"] = True
    return ns


def do_build(torch, job, ev):
    """Compile only: a failure after every load_inline call succeeded (module code that needs
    the GPU, say) is left to the run phase, which executes the candidate again."""
    import torch.utils.cpp_extension as ext
    failed = []

    def wrap(fn):
        def inner(*a, **k):
            try:
                return fn(*a, **k)
            except BaseException:
                failed.append(1)
                raise
        return inner
    ext.load_inline = wrap(ext.load_inline)
    ext.load = wrap(ext.load)
    try:
        load_candidate(torch, job["kernel"], ev)
    except Verdict:
        if failed:
            raise
        ev["deferred"] = True


def do_maker(torch, job):
    """A maker job (kbench-eval's, mode "pch" or "names"): make what a build asked for, in a
    fresh worker that runs no candidate's code, the one writer of the build cache's pch/ or
    lean/. What came of it, in a word (kbench-eval reads nothing more)."""
    timeout = float(job.get("build_timeout") or 600)
    try:
        if job.get("mode") == "pch":
            return make_pch(torch, job["pch_dir"], job.get("request"), timeout)
        return make_names(job.get("request"), job["lean_dir"], time.time() + timeout,
                          job.get("pch_dir"))
    except Exception:   # a speed-up only: nothing made
        traceback.print_exc()
        return "failed"


def progress(stage):
    """Tell kbench-eval how far the candidate got, in case it dies later."""
    if CHANNEL is not None:
        CHANNEL[0].send({"nonce": CHANNEL[1], "progress": stage})


CHANNEL = None


def ref_failed(what, e):
    """The verdict when the reference itself fails (a bad record, not the candidate's)."""
    traceback.print_exc()
    return Verdict("ref_error", "%s: %s: %s" % (what, type(e).__name__, tail(e)))


def do_run(torch, job, ev, info):
    cuda = info["device"] == "cuda"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    seed = 42
    trials = int(job.get("trials", 5))
    perf = int(job.get("perf_trials", 100))
    warm = int(job.get("warmup", 3))
    atol = float(job.get("atol", 1e-2))
    rtol = float(job.get("rtol", 1e-2))
    rtol_only = bool(job.get("rtol_only", False))
    time_ref = bool(job.get("time_ref", True))

    try:
        ref = exec_source(job["ref"], "kbench_reference")
        Model = ref["Model"]
        get_inputs = ref["get_inputs"]
        get_init_inputs = ref["get_init_inputs"]
        set_seed(torch, seed, cuda)
        init = to_device(torch, get_init_inputs(), dev)
        set_seed(torch, seed, cuda)
        model = Model(*init).to(dev)
    except BaseException as e:  # SystemExit too: the reference's failure, not the candidate's
        raise ref_failed("reference", e)

    # the reference first, whole, before any of the candidate's code runs: its outputs for
    # the correctness trials (sealed) and its timing, so that nothing the candidate does (a
    # torch function rebound, a thread of its own) can change or slow it
    own = own_threads(torch, cuda)

    def draw(s, ran):
        """The inputs under seed s (ran: the candidate's code has run)."""
        set_seed(torch, s, cuda)
        try:
            return to_device(torch, get_inputs(), dev)
        except BaseException as e:
            if not ran:
                raise ref_failed("reference get_inputs()", e)
            traceback.print_exc()   # it did not raise under this seed before
            raise Verdict("runtime_error", "get_inputs() raised once the candidate's code had "
                          "run: %s: %s" % (type(e).__name__, tail(e)))

    def redraw(s, digest, what):
        """The inputs under seed s drawn again once the candidate's code ran, as they were
        before it (digest); where not, two more draws: alike, the candidate changed how they
        are drawn (it rebound torch.randn, say); unlike, the problem's are not reproducible."""
        xs = draw(s, True)
        if input_digest(torch, xs) == digest:
            return xs
        again = [input_digest(torch, draw(s, True)) for _ in range(2)]
        if again[0] == again[1]:
            raise Verdict("mismatch", "get_inputs() drew other inputs for %s under its seed "
                          "once the candidate's code had run than before it, the same twice: "
                          "the candidate changed how they are drawn" % what)
        raise Verdict("ref_error", "get_inputs() draws other inputs each time under the same "
                      "seed (%s): inputs not from torch's, Python's or NumPy's seeded "
                      "generators" % what)

    set_seed(torch, seed, cuda)
    seeds = [int(torch.randint(0, 2 ** 32 - 1, (1,)).item()) for _ in range(trials)]
    sealed = Sealed(torch)
    digests = []
    for s in seeds:
        orig = draw(s, False)
        digests.append(input_digest(torch, orig))
        try:
            with torch.no_grad():
                ref_out = model(*orig)     # inputs of its own: drawn again for the candidate
        except BaseException as e:
            raise ref_failed("reference forward", e)
        flat = flatten(torch, ref_out)
        if flat is None:    # no output to judge a candidate by
            raise Verdict("ref_error", "reference output is %s, not a tensor or a tuple of "
                          "tensors" % type(ref_out).__name__)
        if not ev.get("ref_nan") and any((t.is_floating_point() or t.is_complex()) and
                                         bool(t.isnan().any()) for t in flat):
            ev["ref_nan"] = True    # no candidate can match it: kbench-eval says so
        sealed.add(flat)
        del orig, ref_out, flat
    rt = None
    if perf > 0:    # the timing's inputs: drawn again for the candidate, as they are now
        inputs = draw(seed, False)
        timing_digest = input_digest(torch, inputs)
        if time_ref:
            try:
                rt = stats_of(Timer(torch, cuda, bool(job.get("flush_l2", False)), own)
                              .measure(model, inputs, warm, perf))
            except Verdict as v:    # the reference's own threads: no candidate's code ran
                raise Verdict("ref_error", "reference timing: %s" % v.message)
            except BaseException as e:
                raise ref_failed("reference timing", e)
        del inputs
    del model
    # threads the reference started are not the candidate's
    own = own | task_ids()

    ns = load_candidate(torch, job["kernel"], ev)
    progress("compiled")
    ModelNew = ns.get("ModelNew")
    if ModelNew is None:
        raise Verdict("missing_modelnew", "the candidate defines no ModelNew")
    try:
        set_seed(torch, seed, cuda)
        init_new = to_device(torch, clone_all(torch, init), dev)
        set_seed(torch, seed, cuda)
        new = ModelNew(*init_new)
        if isinstance(new, torch.nn.Module):
            new = new.to(dev)
        if cuda:
            torch.cuda.synchronize()
    except BaseException as e:  # SystemExit too: the constructor failed
        traceback.print_exc()
        if cuda and is_cuda_error(e):
            raise Verdict("cuda_error", "ModelNew(): %s" % tail(e))
        raise Verdict("init_error", "ModelNew(): %s: %s" % (type(e).__name__, tail(e)))

    # correctness: KernelBench's seeds, the same inputs drawn again, the candidate on a copy
    # (the one drawn is kept to find a change), against the reference's sealed outputs
    stats = {"max_abs_err": 0.0, "max_rel_err": 0.0}
    passed = 0
    ev["trials_passed"] = 0
    for i, s in enumerate(seeds):
        orig = redraw(s, digests[i], "trial %d" % (i + 1))
        new_in = clone_all(torch, orig)
        poison(torch, cuda, sealed.kept(i))
        try:
            with torch.no_grad():
                out = new(*new_in)
            if cuda:
                KEPT.sync()
        except Exception as e:
            traceback.print_exc()
            if cuda and is_cuda_error(e):
                raise Verdict("cuda_error", "forward: %s" % tail(e))
            raise Verdict("runtime_error", "forward: %s: %s" % (type(e).__name__, tail(e)))
        ref_out = sealed.open(i)
        try:
            compare(torch, ref_out, out, atol, rtol, rtol_only, stats)
        finally:
            ev["max_abs_err"] = finite(stats["max_abs_err"])
            ev["max_rel_err"] = finite(stats["max_rel_err"])
        del ref_out
        if not same_inputs(torch, orig, new_in):
            ev["inputs_mutated"] = True
            raise Verdict("mismatch", "the candidate modified its inputs")
        passed += 1
        ev["trials_passed"] = passed
    ev["correct"] = True

    if perf <= 0:
        return
    timer = Timer(torch, cuda, bool(job.get("flush_l2", False)), own)
    inputs = redraw(seed, timing_digest, "the timing")
    try:
        kt = stats_of(timer.measure(new, inputs, warm, perf))
    except Verdict:     # a thread that outlives the call
        ev["correct"] = False
        raise
    except Exception as e:
        traceback.print_exc()
        ev["correct"] = False
        if cuda and is_cuda_error(e):
            raise Verdict("cuda_error", "timing: %s" % tail(e))
        raise Verdict("runtime_error", "timing: %s: %s" % (type(e).__name__, tail(e)))
    ev["kernel_ms"] = sig3(kt["mean"])
    ev["kernel_ms_median"] = sig3(kt["median"])
    ev["kernel_ms_std"] = sig3(kt["std"])
    if rt is not None:
        ev["ref_ms"] = sig3(rt["mean"])
        ev["ref_ms_median"] = sig3(rt["median"])
        if kt["mean"] > 0:
            # significant digits: a kernel 20000 times slower is not 0.0
            ev["speedup"] = float("%.4g" % (rt["mean"] / kt["mean"]))
            # excessive_speedup is kbench-eval's (kbench_eval_set_speedup): one rule


def gpu_facts(torch):
    """The GPU that times the candidates (CUDA device 0; every worker's GPU is of the kind
    the probe sees first) with, where nvidia-smi answers, the driver and its maximum clocks
    (MHz): what a timing is reported with."""
    import subprocess
    name = torch.cuda.get_device_name(0)
    facts = {"name": name}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,"
                              "clocks.max.memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) == 4 and f[0] == name:
                facts.update(driver=f[1], sm_mhz=int(f[2]), mem_mhz=int(f[3]))
                break
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return facts


def probe_info(torch, want):
    info = {"ready": True, "torch": torch.__version__, "python": sys.version.split()[0]}
    cuda = False
    if want != "cpu":
        try:
            cuda = torch.cuda.is_available()
        except Exception:
            cuda = False
    if want == "cuda" and not cuda:
        info["warning"] = "CUDA requested but torch.cuda is not available"
    info["device"] = "cuda" if cuda else "cpu"
    return info


def main():
    fin, fout = parse_args(sys.argv)
    os.set_inheritable(fin, False)
    chan = Channel(fout)
    want = os.environ.get("KBENCH_DEVICE", "auto")
    try:
        import torch
    except Exception as e:
        chan.send({"ready": False, "message": "cannot import torch: %s" % tail(e)})
        return 1
    keep_torch(torch)
    # a CUDA device is touched only by run workers; build workers see none
    info = probe_info(torch, "cpu" if want == "cpu" else "auto")
    if "--probe" in sys.argv and info["device"] == "cuda":
        # only the probe touches every GPU: their architectures and count
        caps = sorted({"%d.%d" % torch.cuda.get_device_capability(i)
                       for i in range(torch.cuda.device_count())})
        info["arch"] = ";".join(caps)
        info["gpus"] = torch.cuda.device_count()
        info["gpu"] = gpu_facts(torch)
    chan.send(info)
    job = read_job(fin)
    t_job = time.perf_counter()
    nonce = job.get("nonce")
    mode = job.get("mode")
    global CHANNEL
    CHANNEL = (chan, nonce)
    if mode in ("pch", "names"):    # a maker: no candidate's code here
        chan.send({"nonce": nonce, "eval": {"maker": do_maker(torch, job)}})
        return 0
    if job.get("device"):
        info["device"] = job["device"]
    # the build cache of this source (same path and flags in the build and the run phase,
    # so the run phase finds the build up to date)
    if job.get("extensions_dir"):
        os.makedirs(job["extensions_dir"], exist_ok=True)
        os.environ["TORCH_EXTENSIONS_DIR"] = job["extensions_dir"]
    if job.get("arch"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = job["arch"]
    ext_cache()
    if job.get("pch_dir"):
        ext_pch(torch, job["pch_dir"], mode == "build")
    if job.get("lean"):     # the build's deadline (time.time()), where it has one
        ext_lean(job.get("lean_dir"), time.time() - (time.perf_counter() - t_job) +
                 float(job["build_timeout"]) if job.get("build_timeout") else None)
    if info["device"] == "cpu":
        cpu_only_extensions()
    ev = {"compiled": False, "correct": False}
    t0 = time.perf_counter()
    try:
        if mode == "build":
            do_build(torch, job, ev)
        else:
            do_run(torch, job, ev, info)
        ev["error"] = None
    except Verdict as v:
        ev["error"] = v.error
        ev["message"] = v.message
        ev["correct"] = False
    except BaseException as e:  # the candidate raised something odd at an odd time
        traceback.print_exc()
        ev["error"] = "runtime_error"
        ev["message"] = "%s: %s" % (type(e).__name__, tail(e))
        ev["correct"] = False
    ev["run_s"] = round(time.perf_counter() - t0, 3)
    ev.update(LEAN)
    for k in list(ev):
        if isinstance(ev[k], float):
            ev[k] = finite(ev[k])
    sys.stdout.flush()
    sys.stderr.flush()
    res = {"nonce": nonce, "eval": ev}
    res.update(WANT)    # the build's requests to the makers, beside the eval object
    chan.send(res)
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
