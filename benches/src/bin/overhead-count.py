# gdb script (run through OVERHEAD_WRAP, see overhead.rs): counts the instructions the shim (libtessera.so)
# executes in one intercepted call, stepping over the real driver. Samples are taken at a launch right after
# a cuStreamSynchronize of the program; the stops perturb timing, so the fast path's time-stamp read is
# overridden to 0, a time at which the stream counts as busy: the path followed is the one a launch on a
# busy stream takes. Each sample prints the count per library and per function.
# Env: COUNT_ENTRY (the entry point, default cuLaunchKernel), COUNT_SKIP (syncs first), COUNT_SAMPLES,
# COUNT_OUT (file the counts are appended to).
import gdb, os, re, collections, subprocess
for c in ["set pagination off", "set confirm off", "set breakpoint pending on", "set print thread-events off"]:
    gdb.execute(c)
ENTRY_NAME = os.environ.get("COUNT_ENTRY", "cuLaunchKernel")
SKIP = int(os.environ.get("COUNT_SKIP", "100")); SAMPLES = int(os.environ.get("COUNT_SAMPLES", "8"))
out = open(os.environ.get("COUNT_OUT", "/tmp/count.txt"), "a")
gdb.execute("break main"); gdb.execute("run")
ranges = {}
for line in gdb.execute("info proc mappings", to_string=True).splitlines():
    p = line.split()
    if len(p) >= 5 and (p[-1].startswith("/") or p[-1].startswith("[")):
        lo, hi = int(p[0], 16), int(p[1], 16); name = os.path.basename(p[-1])
        a, b = ranges.get(name, (lo, hi)); ranges[name] = (min(a, lo), max(b, hi))
base = ranges["libtessera.so"][0]
shim = [l.split()[-1] for l in gdb.execute("info proc mappings", to_string=True).splitlines() if l.endswith("libtessera.so")][0]
ENTRY = [int(l.split()[0], 16) for l in subprocess.run(["nm", "-D", "--defined-only", shim], capture_output=True,
         text=True).stdout.splitlines() if l.split()[-1] == ENTRY_NAME][0]
prog = os.path.basename(gdb.current_progspace().filename)
def lib_of(pc):
    for n, (lo, hi) in ranges.items():
        if lo <= pc < hi: return n
    return "?"
gdb.execute("set scheduler-locking step")
sync = gdb.Breakpoint("cuStreamSynchronize"); sync.ignore_count = SKIP
for s in range(SAMPLES):
    gdb.execute("continue", to_string=True)
    sync.enabled = False
    entry = gdb.Breakpoint("*0x%x" % (base + ENTRY), internal=True)
    gdb.execute("continue", to_string=True)
    entry.delete()
    counts = collections.Counter(); funcs = collections.Counter()
    while True:
        pc = int(gdb.parse_and_eval("$pc")); lib = lib_of(pc)
        if lib == prog: break
        if lib == "libtessera.so" and "rdtsc" in gdb.execute("x/i $pc", to_string=True):
            gdb.execute("stepi", to_string=True); counts[lib] += 1
            gdb.execute("set $rax = 0"); gdb.execute("set $rdx = 0")
            continue
        if lib in ("libtessera.so", "ld-linux-x86-64.so.2"):
            counts[lib] += 1
            sym = gdb.execute("info symbol 0x%x" % pc, to_string=True).split(" in section")[0]
            funcs[re.sub(r" \+ \d+$", "", sym)] += 1
            gdb.execute("stepi", to_string=True)
        else:
            counts["calls stepped over in " + lib] += 1
            sp = int(gdb.parse_and_eval("$sp"))
            ret = int.from_bytes(bytes(gdb.selected_inferior().read_memory(sp, 8)), "little")
            gdb.Breakpoint("*0x%x" % ret, temporary=True, internal=True)
            gdb.execute("continue", to_string=True)
    out.write("sample %d: %s\n" % (s, dict(counts)))
    for f, c in funcs.most_common(): out.write("    %5d  %s\n" % (c, f))
    out.flush()
    sync.enabled = True; sync.ignore_count = 3
out.close()
gdb.execute("kill")
