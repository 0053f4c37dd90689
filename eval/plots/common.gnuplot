# Shared by every plot: a PNG named after the plot file, in the results
# folder. Plot files load this, then set what they plot.
#   gnuplot -e "results='DIR'; plots='eval/plots'" eval/plots/NAME.gp
# writes DIR/NAME.png (eval/experiments.py plots runs them so).
if (!exists("results")) results = "eval/results"
set terminal pngcairo size 900,540 font "sans,11" noenhanced
set output results . "/" . name . ".png"
set grid ytics lc rgb "#dddddd"
set key top left
set datafile missing "NaN"
