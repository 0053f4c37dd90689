# Salus section 5.1: average and p95 JCT per policy and variant.
# Data: eval_jct.runs.dat (salus51 --json, "runs"; columns by name).
name = "eval_jct_bars"
load plots . "/common.gnuplot"
f = results . "/eval_jct.runs.dat"
set style fill solid 0.8 border -1
set boxwidth 0.2
set key top left
set ylabel "minutes"
set xrange [-0.6:3.6]
set yrange [0:*]
set title "Salus 5.1: average (solid) and p95 (light) JCT per policy (simulator)"
pol(s) = s eq "fifo" ? 0 : s eq "srtf" ? 1 : s eq "pack" ? 2 : 3
x(s, v, k) = pol(s) + (v eq "paper" ? -0.2 : 0.2) + k
set xtics ("fifo" 0, "srtf" 1, "pack" 2, "fair" 3)
plot f using (x(strcol("policy"), strcol("variant"), -0.1)):(strcol("variant") eq "paper" ? column("avg_jct_min") : 1/0) with boxes lc rgb "#1f77b4" title "paper variant: avg", \
     f using (x(strcol("policy"), strcol("variant"), 0.1)):(strcol("variant") eq "paper" ? column("p95_jct_min") : 1/0) with boxes lc rgb "#aec7e8" title "paper variant: p95", \
     f using (x(strcol("policy"), strcol("variant"), -0.1)):(strcol("variant") eq "salus" ? column("avg_jct_min") : 1/0) with boxes lc rgb "#d62728" title "salusd defaults: avg", \
     f using (x(strcol("policy"), strcol("variant"), 0.1)):(strcol("variant") eq "salus" ? column("p95_jct_min") : 1/0) with boxes lc rgb "#ff9896" title "salusd defaults: p95"
