# compare_table.awk: the table of bench/redesign_compare.sh and bench/write_path_compare.sh, from their results
# file (one line per figure and run: "figure side round value load1", side old or new, value "-" when the run gave
# none): per figure, every run's value@load on each side, the medians and new/old, in the order figures first came.
{ key = $1; if (!(key in order)) { order[key] = ++n; names[n] = key }
  v = $4; if ($2 == "old") { old[key] = old[key] (old[key] == "" ? "" : " / ") v "@" $5; ov[key, ++no[key]] = v }
  else { new[key] = new[key] (new[key] == "" ? "" : " / ") v "@" $5; nv[key, ++nn[key]] = v } }
function median(arr, key, cnt,   i, j, t, a, m) {
  m = 0
  for (i = 1; i <= cnt; i++) if (arr[key, i] != "-" && arr[key, i] != "") a[++m] = arr[key, i] + 0
  if (!m) return ""
  for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
  return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
  printf "%-42s %-34s %-34s %12s %12s %8s\n", "figure", "old runs (value@load)", "new runs (value@load)", "old median", "new median", "new/old"
  for (i = 1; i <= n; i++) {
    k = names[i]
    mo = median(ov, k, no[k]); mn = median(nv, k, nn[k])
    printf "%-42s %-34s %-34s %12s %12s %8s\n", k, old[k], new[k], mo, mn, (mo != "" && mn != "" && mo + 0 != 0) ? sprintf("%.2f", mn / mo) : "-"
  }
}
