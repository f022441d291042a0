#!/usr/bin/env python3
"""Groups sanitizer reports by stack, so that thousands of warnings read as a few causes.

    Benchmarks/sanitizer-groups.py [--frames N] [--suppressions FILE] LOG...

LOG: the output of `swift test --sanitize=thread` (ThreadSanitizer "data race" warnings) or of an
AddressSanitizer/LeakSanitizer run (leak reports, also the `log_path=` files of child processes).
Each report is reduced to its first N frames (default 3) that are not the allocator, the Swift
runtime or the sanitizer's interceptors; the groups are printed largest first, with an example.
For a data race both stacks (the access and the previous access) make the key, each marked with
whether it ran inside `Synchronization.Mutex.withLock` (a futex lock ThreadSanitizer does not
see). With --suppressions, each leak group says which suppression matches it (LeakSanitizer's
rule: the template is a substring of a frame's function, file or module).
"""
import argparse, collections, re, sys

NOISE = re.compile(
    r"(^|\W)(malloc|calloc|realloc|strdup|posix_memalign|operator new|__interceptor_|__tsan_|__asan_|"
    r"swift_slowAlloc|swift_allocObject|swift_retain|swift_release|swift_bridgeObject|swift_weak|"
    r"swift_task_alloc|swift_job_run|swift::|formWeakReference|_ContiguousArrayBuffer|"
    r"_allocateUninitializedArray|_allocateStringStorage|_StringGuts|reserveCapacity|"
    r"\$sSa6append|\$sSa2pe|\$sSS1p|\$ss22_Contig|\$ss27_allocate|__libc_|start_thread|clone|"
    r"_dispatch_|asan_thread_start|__tsan_thread_start|\$sIeg|\$sIey|<compiler-generated>|"
    r"Mutex.*withLock|withLock)")
FRAME = re.compile(r"^\s+#(\d+) 0x[0-9a-f]+(?: in (.+?))?(?:\s+(/\S+|\(\S+\)|\S+\.[ch]\S*))?(?: \(BuildId.*)?$")
HEADER = re.compile(r"^(Direct|Indirect) leak of (\d+) byte|WARNING: ThreadSanitizer: (.+?) \(pid|^  (Write|Read|Previous write|Previous read|Atomic \w+|Previous atomic \w+) of size|ERROR: AddressSanitizer: (\S+)")


def demangle_short(fn):
    fn = re.sub(r"\(BuildId: [0-9a-f]+\)", "", fn).strip()
    return fn[:140]


def parse(paths):
    """Yields (kind, bytes, [stack, ...]) with each stack a list of (function, where)."""
    for path in paths:
        report = None
        stack = None
        with open(path, errors="replace") as f:
            for line in f:
                m = HEADER.search(line)
                if m:
                    if m.group(1):  # a leak: one stack
                        if report: yield report
                        report = (f"{m.group(1).lower()} leak", int(m.group(2)), [])
                        stack = []
                        report[2].append(stack)
                    elif m.group(3):  # a TSan warning: stacks follow, each after an access line
                        if report: yield report
                        report = (m.group(3), 0, [])
                        stack = None
                    elif m.group(4) and report is not None:
                        stack = []
                        report[2].append(stack)
                    elif m.group(5):
                        if report: yield report
                        report = (m.group(5), 0, [])
                        stack = []
                        report[2].append(stack)
                    continue
                if stack is None:
                    continue
                fm = FRAME.match(line)
                if fm:
                    # A frame without symbols (libcurl): its module and offset stand for the function.
                    stack.append((fm.group(2) or (fm.group(3) or "?").split("/")[-1].strip("()"), fm.group(3) or ""))
                elif line.strip() == "" and stack:
                    stack = None
        if report: yield report


def key_of(stack, frames):
    kept = [fn for fn, where in stack if not NOISE.search(fn)]
    locked = any("withLock" in fn for fn, _ in stack[:6])
    return tuple(demangle_short(fn) for fn in kept[:frames]), locked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=3)
    ap.add_argument("--suppressions")
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    templates = []
    if a.suppressions:
        for line in open(a.suppressions):
            line = line.strip()
            if line.startswith("leak:"): templates.append(line[5:])
    groups = collections.OrderedDict()
    for kind, size, stacks in parse(a.logs):
        keys = tuple(key_of(s, a.frames) for s in stacks[:2])
        g = groups.setdefault((kind, keys), {"count": 0, "bytes": 0, "supp": set()})
        g["count"] += 1
        g["bytes"] += size
        if templates and stacks:
            for t in templates:
                if any(t in fn or t in where for fn, where in stacks[0]): g["supp"].add(t)
    total = sum(g["count"] for g in groups.values())
    print(f"{total} reports in {len(groups)} groups")
    for (kind, keys), g in sorted(groups.items(), key=lambda kv: -kv[1]["count"]):
        extra = f", {g['bytes']} bytes" if g["bytes"] else ""
        supp = f"  [suppressed by: {', '.join(sorted(g['supp']))}]" if a.suppressions else ""
        if a.suppressions and not g["supp"]: supp = "  [NOT SUPPRESSED]"
        print(f"\n{g['count']:6d} × {kind}{extra}{supp}")
        for i, (frames, locked) in enumerate(keys):
            label = ("access", "previous")[i] if len(keys) > 1 else "stack"
            print(f"    {label}{' (in withLock)' if locked else ''}:")
            for fn in frames or ("(only runtime frames)",):
                print(f"        {fn}")


if __name__ == "__main__":
    main()
