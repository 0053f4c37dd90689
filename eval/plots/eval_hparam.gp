# Salus 5.2: makespan of 300 identical jobs per model, one at a time (strict
# fifo, one lane) against packed (pack, salusd's defaults), ratio on top.
# Data: eval_hparam.models.dat (hparam --json, "models"; columns by name).
name = "eval_hparam"
load plots . "/common.gnuplot"
f = results . "/eval_hparam.models.dat"
set title "Salus 5.2: hyper-parameter tuning, 300 jobs per model (paper: 2.38x best)"
set style fill solid 0.8 border -1
set boxwidth 0.35
set ylabel "makespan (min)"
set yrange [0:*]
set xrange [-0.6:*]
set key top right
plot f using ($0 - 0.18):"one_at_a_time_min":xtic(1) with boxes lc rgb "#1f77b4" title "one at a time", \
     f using ($0 + 0.18):"packed_min" with boxes lc rgb "#ff7f0e" title "packed (salus)", \
     f using ($0):(column("one_at_a_time_min") * 1.04):(sprintf("%.2fx", column("ratio"))) with labels notitle
