#!/usr/bin/env python3
"""Summarize a bench/compare.sh run: medians, ratio table, chart.

usage: bench/plot.py compare.csv [--memory memory.csv] [--env env.txt] [--out DIR]

compare.csv holds the shared harness's rows (label = repetition):
  label,impl,variant,nranks,coll,bytes,iters,lat_us,lat_min_us,lat_max_us,
  algbw_GBps,busbw_GBps,check
Writes DIR/medians.csv (median over repetitions of each implementation,
world size, collective and size), DIR/ratio.md (targets, then time ratios
nexar / peer for every collective) and DIR/ratio.png (allreduce bus bandwidth
and time against size, one column per world size; drawn with gnuplot).
"""
import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

NEXAR = "nexar/quic"
# preferred column order of the peers
PEER_ORDER = ["openmpi/tcp", "gloo/ring", "gloo/hd", "gloo/tcp", "openmpi/default", "mpich/default"]
COLL_ORDER = ["allreduce", "barrier", "broadcast", "allgather", "reduce_scatter", "alltoall",
              "pingpong"]
MIB64 = 64 << 20


def human(b):
    b = int(b)
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def fmt_us(us):
    if us is None:
        return "-"
    if us >= 10000:
        return f"{us / 1000:.1f} ms"
    if us >= 100:
        return f"{us:.0f}"
    return f"{us:.1f}"


def fmt_ratio(r):
    if r is None:
        return "-"
    return f"{r:.2f}" if r < 10 else f"{r:.1f}"


def load(path):
    rows = defaultdict(list)  # (impl/variant, n, coll, bytes) -> [(lat, busbw, ok)]
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = (f"{r['impl']}/{r['variant']}", int(r["nranks"]), r["coll"], int(r["bytes"]))
            rows[key].append((float(r["lat_us"]), float(r["busbw_GBps"]), r["check"]))
    med = {}
    for key, v in rows.items():
        med[key] = {
            "lat": statistics.median(x[0] for x in v),
            "bw": statistics.median(x[1] for x in v),
            "runs": len(v),
            "fail": sum(1 for x in v if x[2] == "FAIL"),
        }
    return med


def peers_of(med, coll):
    found = {k[0] for k in med if k[2] == coll and k[0] != NEXAR}
    order = [p for p in PEER_ORDER if p in found]
    return order + sorted(found - set(order))


def targets(med, mem, nps, lines):
    lines += ["## Targets", "",
              "Median over repetitions; ranks are processes; time is the harness's mean over "
              "ranks of each rank's mean time per op. Ratio: nexar / peer.", "",
              "| target | n | nexar | openmpi/tcp | gloo/ring | ratio vs openmpi/tcp | "
              "ratio vs gloo/ring | met |",
              "|---|---|---|---|---|---|---|---|"]

    def get(impl, n, coll, b):
        return med.get((impl, n, coll, b))

    for n in nps:
        nx, om, gl = (get(i, n, "allreduce", MIB64) for i in (NEXAR, "openmpi/tcp", "gloo/ring"))
        if not nx:
            continue
        r1 = nx["bw"] / om["bw"] if om and om["bw"] else None
        r2 = nx["bw"] / gl["bw"] if gl and gl["bw"] else None
        met = "yes" if (r1 is None or r1 >= 1) and (r2 is None or r2 >= 1) else "**no**"
        bw = lambda x: f"{x['bw']:.3f}" if x else "-"
        lines.append(f"| allreduce f32 sum 64 MiB busbw (GB/s), >= both | {n} | {bw(nx)} | "
                     f"{bw(om)} | {bw(gl)} | {fmt_ratio(r1)} | {fmt_ratio(r2)} | {met} |")
    for coll, b, what in (("barrier", 0, "barrier latency (us), <= 1.5x openmpi/tcp"),
                          ("allreduce", 8, "allreduce 8 B latency (us), <= 1.5x openmpi/tcp")):
        for n in nps:
            nx, om = get(NEXAR, n, coll, b), get("openmpi/tcp", n, coll, b)
            gl = get("gloo/ring" if coll == "allreduce" else "gloo/tcp", n, coll, b)
            if not nx:
                continue
            r1 = nx["lat"] / om["lat"] if om else None
            r2 = nx["lat"] / gl["lat"] if gl else None
            met = "-" if r1 is None else ("yes" if r1 <= 1.5 else "**no**")
            lines.append(f"| {what} | {n} | {fmt_us(nx['lat'])} | "
                         f"{fmt_us(om['lat']) if om else '-'} | "
                         f"{fmt_us(gl['lat']) if gl else '-'} | "
                         f"{fmt_ratio(r1)} | {fmt_ratio(r2)} | {met} |")
    for m in mem:
        ratio = float(m["ratio"])
        lines.append(f"| peak RSS of one rank, {human(m['bytes'])} allreduce, < 3x buffer | "
                     f"{m['nranks']} | {int(m['peak_rss_kib']) / 1024:.0f} MiB = {ratio:.2f}x | "
                     f"- | - | - | - | {'yes' if ratio < 3 else '**no**'} |")
    lines.append("")
    if any(m for m in mem):
        lines += ["Memory rows: `" + mem[0]["command"].replace(f"-n {mem[0]['nranks']}", "-n N")
                  + "` (nexar-perf reports getrusage ru_maxrss, max over ranks).", ""]


def ratio_tables(med, nps, lines):
    colls = sorted({k[2] for k in med}, key=lambda c: COLL_ORDER.index(c)
                   if c in COLL_ORDER else 99)
    lines += ["## Time ratio nexar / peer per collective", "",
              "Above 1: nexar is slower (bus bandwidth ratio = 1 / time ratio). `nexar us` is "
              "libnexar's median time per op.", ""]
    for coll in colls:
        peers = peers_of(med, coll)
        if not peers or not any(k[0] == NEXAR and k[2] == coll for k in med):
            continue
        sizes = sorted({k[3] for k in med if k[2] == coll})
        lines += [f"### {coll}", ""]
        head = "| size |"
        sep = "|---|"
        for n in nps:
            head += f" n={n} nexar us |" + "".join(f" n={n} vs {p} |" for p in peers)
            sep += "---|" * (1 + len(peers))
        lines += [head, sep]
        for b in sizes:
            row = f"| {human(b) if coll != 'barrier' else '-'} |"
            for n in nps:
                nx = med.get((NEXAR, n, coll, b))
                row += f" {fmt_us(nx['lat']) if nx else '-'} |"
                for p in peers:
                    pm = med.get((p, n, coll, b))
                    row += f" {fmt_ratio(nx['lat'] / pm['lat']) if nx and pm else '-'} |"
            lines.append(row)
        lines.append("")


def chart(med, nps, out_png):
    gp = shutil.which("gnuplot")
    if not gp:
        print("plot.py: no gnuplot; skipping the chart (apt-get install gnuplot-nox)",
              file=sys.stderr)
        return False
    impls = [NEXAR] + peers_of(med, "allreduce")
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for impl in impls:
            for n in nps:
                pts = sorted((k[3], v) for k, v in med.items()
                             if k[0] == impl and k[1] == n and k[2] == "allreduce")
                if not pts:
                    continue
                path = os.path.join(d, f"{impl.replace('/', '_')}_{n}.dat")
                with open(path, "w") as f:
                    for b, v in pts:
                        f.write(f"{b} {v['lat']} {v['bw']}\n")
                files[(impl, n)] = path
        colors = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#7f7f7f"]
        script = [
            f"set terminal pngcairo size {420 * len(nps) + 80},820 font 'sans,10'",
            f"set output '{out_png}'",
            f"set multiplot layout 2,{len(nps)} title 'allreduce f32 sum, ranks as processes "
            "on one 2-core host (median of runs)'",
            "set logscale x 2", "set format x '%.0b%B'", "set grid",
            "set key top left font ',8'",
        ]
        for row, (col, ylab, logy) in enumerate(((3, "bus bandwidth (GB/s)", False),
                                                  (2, "time per op (us)", True))):
            for n in nps:
                script.append("set logscale y 10" if logy else "unset logscale y")
                script.append(f"set format y '{'%g' if logy else '%.2f'}'")
                script.append(f"set title 'n = {n}'")
                script.append("set xlabel 'size (bytes)'")
                script.append(f"set ylabel '{ylab}'")
                plots = []
                for i, impl in enumerate(impls):
                    if (impl, n) in files:
                        lw = 3 if impl == NEXAR else 1.5
                        plots.append(f"'{files[(impl, n)]}' using 1:{col} with linespoints "
                                     f"lw {lw} pt 7 ps 0.5 lc rgb '{colors[i % len(colors)]}' "
                                     f"title '{impl}'")
                script.append("plot " + ", ".join(plots) if plots else "set multiplot next")
        script.append("unset multiplot")
        gpf = os.path.join(d, "chart.gp")
        with open(gpf, "w") as f:
            f.write("\n".join(script) + "\n")
        r = subprocess.run([gp, gpf], capture_output=True, text=True)
        if r.returncode:
            print("plot.py: gnuplot failed:\n" + r.stderr, file=sys.stderr)
            return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--memory")
    ap.add_argument("--env")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    med = load(a.csv)
    if not med:
        sys.exit("plot.py: no rows in " + a.csv)
    nps = sorted({k[1] for k in med})
    mem = []
    if a.memory and os.path.exists(a.memory):
        with open(a.memory, newline="") as f:
            mem = list(csv.DictReader(f))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "medians.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["impl_variant", "nranks", "coll", "bytes", "runs", "lat_us_median",
                    "busbw_GBps_median", "check_failures"])
        for k in sorted(med):
            v = med[k]
            w.writerow([*k, v["runs"], f"{v['lat']:.3f}", f"{v['bw']:.4f}", v["fail"]])
    lines = ["# libnexar vs Open MPI and Gloo: same harness, same run", ""]
    if a.env and os.path.exists(a.env):
        lines += ["```"] + open(a.env).read().strip().splitlines() + ["```", ""]
    runs = max(v["runs"] for v in med.values())
    fails = [k for k, v in med.items() if v["fail"]]
    lines += [f"Medians of up to {runs} repetition(s) per point. "
              + (f"Check failures: {', '.join('/'.join(map(str, k)) for k in fails)}."
                 if fails else "Every result checked ok."), ""]
    targets(med, mem, nps, lines)
    ratio_tables(med, nps, lines)
    drawn = chart(med, nps, os.path.join(a.out, "ratio.png"))
    if drawn:
        lines += ["![allreduce bus bandwidth and time](ratio.png)", ""]
    with open(os.path.join(a.out, "ratio.md"), "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {a.out}/medians.csv, {a.out}/ratio.md"
          + (f", {a.out}/ratio.png" if drawn else ""))


if __name__ == "__main__":
    main()
