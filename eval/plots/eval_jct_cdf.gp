# Salus section 5.1: CDF of job completion times per policy, the paper's
# variant (salusd --strict --spread-limit 0) and salusd's defaults.
# Data: eval_jct_jobs.csv (salus51 --jobs-csv).
name = "eval_jct_cdf"
load plots . "/common.gnuplot"
f = results . "/eval_jct_jobs.csv"
set datafile separator ","
set key bottom right
set xlabel "JCT (min)"
set ylabel "fraction of jobs"
set yrange [0:1]
set multiplot layout 1,2 title "Salus 5.1: JCT CDF per policy (simulator)"
do for [v in "paper salus"] {
    set title (v eq "paper" ? "paper variant (--strict --spread-limit 0)" : "salusd defaults")
    plot for [p in "fifo srtf pack fair"] f skip 1 \
        using ((strcol(1) eq p && strcol(2) eq v) ? $9 / 60 : 1/0):(1) smooth cnormal \
        with lines lw 2 title p
}
unset multiplot
