"""report.py -- turn measured rounds into summaries, ratios and a Markdown report.

Owns: the per-target summary (median/min/max of each metric over rounds), the
paired ratios (computed within each round, between targets measured side by
side, then summarised: noise that hits a whole round cancels), and the
Markdown rendering.  Input and output are plain dicts, so the JSON file
written by bench/run holds exactly what the table shows, plus every round.
"""
from common import GiB, summarize

# metric key -> (column title, format)
METRICS = [
	("stall", "stall s", "%.3f"),
	("absorb_gibs", "absorb GiB/s", "%.2f"),
	("durable", "durable s", "%.3f"),
	("durable_gibs", "durable GiB/s", "%.2f"),
	("daemon_cpu_s", "daemon CPU s", "%.2f"),
	("rss_over_cache_mib", "peak RSS - cache MiB", "%.0f"),
	("writer_sys", "writer sys s", "%.2f"),
	("writer_cpu_gib", "writer CPU s/GiB", "%.2f"),
	("daemon_cpu_gib", "daemon CPU s/GiB", "%.2f"),
	("kthread_cpu_gib", "kernel threads CPU s/GiB", "%.2f"),
	("cpu_wait_pct", "CPU wait %", "%.0f"),
]


def derive(r):
	"""Add throughput figures to one round's record of one target."""
	if r.get("stall"):
		r["absorb_gibs"] = r["bytes"] / GiB / r["stall"]
		if r.get("files"):
			r["rate_files_s"] = r["files"] / r["stall"]
	if r.get("durable"):
		r["durable_gibs"] = r["bytes"] / GiB / r["durable"]
	# CPU per GiB absorbed: the writer's own (user + system: the kernel's copy
	# into tmpfs or the page cache is charged there), the FUSE daemon's, and
	# the kernel threads' (writeback, io_uring workers; machine-wide, so other
	# jobs' share is in it too).
	gib = r.get("bytes", 0) / GiB
	if gib:
		if r.get("writer_user") is not None and r.get("writer_sys") is not None:
			r["writer_cpu_gib"] = (r["writer_user"] + r["writer_sys"]) / gib
		if r.get("daemon_cpu_s") is not None:
			r["daemon_cpu_gib"] = r["daemon_cpu_s"] / gib
		if r.get("kthread_cpu_s") is not None:
			r["kthread_cpu_gib"] = r["kthread_cpu_s"] / gib
	return r


def summarize_targets(rounds, targets):
	"""rounds: list of {target: record}.  Returns {target: {metric: summary}}."""
	out = {}
	for t in targets:
		recs = [rd[t] for rd in rounds if t in rd and "error" not in rd[t]]
		errs = [rd[t]["error"] for rd in rounds if t in rd and "error" in rd[t]]
		s = {}
		for key, _, _ in METRICS:
			v = summarize([r.get(key) for r in recs])
			if v:
				s[key] = v
		extra = set(k for r in recs for k, v in r.items()
			    if isinstance(v, (int, float)) and not isinstance(v, bool))
		for key in sorted(extra - set(s)):
			v = summarize([r.get(key) for r in recs])
			if v:
				s[key] = v
		s["rounds_ok"] = len(recs)
		if errs:
			s["errors"] = errs
		out[t] = s
	return out


def paired_ratios(rounds, specs):
	"""specs: list of (name, (target_a, metric_a), (target_b, metric_b), goal).
	Each round gives a/b where both were measured; the summary is over rounds."""
	out = []
	for name, (ta, ma), (tb, mb), goal in specs:
		vals = []
		for rd in rounds:
			a, b = rd.get(ta, {}), rd.get(tb, {})
			if a.get(ma) and b.get(mb):
				vals.append(a[ma] / b[mb])
		out.append({"name": name, "a": [ta, ma], "b": [tb, mb], "goal": goal,
			    "per_round": vals, "summary": summarize(vals)})
	return out


def fmt_bytes_gib(n):
	return "%.2f GiB per checkpoint" % (n / GiB) if n else "size n/a"


def fmt_summary(s, fmt):
	if not s:
		return "-"
	if s["n"] == 1:
		return fmt % s["median"]
	return (fmt + " (" + fmt + "-" + fmt + ")") % (s["median"], s["min"], s["max"])


def markdown_table(summary, labels, metrics=None):
	metrics = metrics or METRICS
	cols = [(k, title, f) for k, title, f in metrics
		if any(k in summary[t] for t in summary)]
	lines = ["| target | " + " | ".join(c[1] for c in cols) + " |",
		 "|---|" + "---|" * len(cols)]
	for t, s in summary.items():
		cells = [fmt_summary(s.get(k), f) for k, _, f in cols]
		name = labels.get(t, t)
		if s.get("errors"):
			name += " (%d failed)" % len(s["errors"])
		lines.append("| %s | %s |" % (name, " | ".join(cells)))
	return "\n".join(lines)


def markdown_ratios(ratios):
	lines = ["| ratio | median (min-max) | rounds | goal |", "|---|---|---|---|"]
	for r in ratios:
		s = r["summary"]
		lines.append("| %s | %s | %d | %s |" % (r["name"], fmt_summary(s, "%.2f"),
							   s["n"] if s else 0, r["goal"] or ""))
	return "\n".join(lines)
