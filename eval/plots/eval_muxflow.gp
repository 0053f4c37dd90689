# MuxFlow: GPU utilisation (nvidia-smi's: time with a kernel running) and
# SM occupancy per placement policy, with the paper's 26 % -> 76 %; online
# p99 inflation and offline normalised throughput (greedy and matching
# with partitions off: concurrent lp segments); matching again under
# the serial dispatch of one op per step into gaps (--lp-serial
# --lp-segment-us 1), --no-gap-fill, with compute partitions, and with
# partitions and gap filling (the service's need declared; searched for
# by salusd at the 20 % objective; searched and guarded, --partitions
# demand, salusd's defaults; not declared and sized by load alone;
# declared at the paper's latency objective).
# Data: eval_muxflow.runs.dat (muxflow --json, "runs"; columns by name).
name = "eval_muxflow"
load plots . "/common.gnuplot"
set terminal pngcairo size 1300,540 font "sans,11" noenhanced
set output results . "/" . name . ".png"
f = results . "/eval_muxflow.runs.dat"
set multiplot layout 1,2 title "MuxFlow: online services + offline training (simulator, salusd priority policy)"
set style fill solid 0.8 border -1
set bmargin 4
set boxwidth 0.25
set xrange [-0.6:10.6]
set yrange [0:1.75]
set key top left
set title "device use"
set ylabel "fraction of the day"
set xtics ("one per\nGPU" 0, "greedy" 1, "match.\noff" 2, "serial\nop steps" 3, "no gap\nfill" 4, "part-\nitions" 5, "part.+\ngap fill" 6, "part.\nsearch" 7, "defaults:\ndemand" 8, "part.\nload" 9, "part.\nat SLO" 10)
set xtics font ",9"
plot f using ($0 - 0.14):"util" with boxes lc rgb "#1f77b4" title "GPU util (nvidia-smi)", \
     f using ($0 + 0.14):"sm_occupancy" with boxes lc rgb "#aec7e8" title "SM occupancy", \
     0.76 with lines dt 2 lc rgb "#d62728" title "paper: 76 % util co-located", \
     0.26 with lines dt 3 lc rgb "#d62728" title "paper: 26 % before"
set title "online and offline"
set ylabel "ratio"
set yrange [0:3.2]
plot f using ($0 - 0.14):"p99_inflation" with boxes lc rgb "#ff7f0e" title "online p99 / alone (mean)", \
     f using ($0 + 0.14):"offline_tput" with boxes lc rgb "#2ca02c" title "offline throughput / alone", \
     1.2 with lines dt 2 lc rgb "#d62728" title "paper: p99 +< 20 %"
unset multiplot
