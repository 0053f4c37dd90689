# Switching cost: the Salus 5.1 srtf run with a cost per lane switch,
# average JCT per switch cost, the paper's strict variant and salusd's
# defaults (work-conserving).
# Data: eval_switch.runs.dat (switchcost --json, "runs"; columns by name).
name = "eval_switch"
load plots . "/common.gnuplot"
f = results . "/eval_switch.runs.dat"
set title "srtf average JCT with a cost per lane switch (Salus 5.1 trace, seed 1)"
set style fill solid 0.8 border -1
set boxwidth 0.35
set ylabel "average JCT (min)"
set yrange [0:*]
set key top left
set xrange [-0.6:4.6]
sw(s) = s eq "none" ? 0 : s eq "salus" ? 1 : s eq "pipeswitch5" ? 2 : s eq "pipeswitch35" ? 3 : s eq "checkpoint" ? 4 : 1/0
set xtics ("none" 0, "salus (26 us)" 1, "5 ms" 2, "35 ms" 3, "checkpoint (PCIe)" 4)
plot f using (sw(strcol("switch")) - 0.18):(strcol("variant") eq "paper" ? column("avg_jct_min") : 1/0) with boxes lc rgb "#1f77b4" title "strict (paper variant)", \
     f using (sw(strcol("switch")) + 0.18):(strcol("variant") eq "salus" ? column("avg_jct_min") : 1/0) with boxes lc rgb "#d62728" title "salusd defaults (work-conserving)"
