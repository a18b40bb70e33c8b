# shellcheck shell=bash
# Shared by the hack/*-timing.sh scripts: read a step's time from `meshctl
# up`'s output and wait for a quiet machine before timing anything.

# step_seconds STEP reads `up`'s output on stdin and prints the seconds of
# the first step whose line starts with STEP ("done: STEP … (1m2.5s)").
step_seconds() {
	local step=$1
	awk -v step="done: $step" 'index($0, step) && match($0, /\([0-9hms.]+\)$/) {
			s = substr($0, RSTART + 1, RLENGTH - 2); t = 0
			if (match(s, /[0-9.]+h/)) { t += substr(s, RSTART, RLENGTH - 1) * 3600 }
			if (match(s, /[0-9.]+m[^s]/) || match(s, /[0-9.]+m$/)) { t += substr(s, RSTART, RLENGTH - 1) * 60 }
			if (match(s, /[0-9.]+s/)) { t += substr(s, RSTART, RLENGTH - 1) }
			printf "%.1f", t; exit }'
}

# busy_percent is the share of CPU time not idle over the next 5 s, from
# /proc/stat: unlike the load average, it does not lag a minute behind.
busy_percent() {
	local a b
	a=$(head -1 /proc/stat)
	sleep 5
	b=$(head -1 /proc/stat)
	awk -v a="$a" -v b="$b" 'BEGIN {
		n = split(a, x, " "); split(b, y, " ")
		for (i = 2; i <= n; i++) { t += y[i] - x[i] }
		idle = (y[5] - x[5]) + (y[6] - x[6])
		printf "%d", (t > 0 ? 100 * (t - idle) / t : 0) }'
}

# settle waits, at most SETTLE_MAX seconds (180), until the machine is
# quiet (under SETTLE_BUSY percent busy, 10): a run that starts while the
# previous one's containers are still being torn down measures that too.
# It prints the busy percent it started at.
settle() {
	local busy deadline=$((SECONDS + ${SETTLE_MAX:-180}))
	while busy=$(busy_percent) && ((busy >= ${SETTLE_BUSY:-10} && SECONDS < deadline)); do :; done
	echo "$busy"
}

# busy_jiffies is the machine's non-idle CPU time so far, in clock ticks.
busy_jiffies() {
	awk '/^cpu / { for (i = 2; i <= NF; i++) { t += $i } print t - $5 - $6 }' /proc/stat
}
