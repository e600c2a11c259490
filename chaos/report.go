package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// PrintResult prints one run: its seed, schedule, counts and verdict.
func PrintResult(w io.Writer, r Result) {
	fmt.Fprintf(w, "seed %d: %s in %.0fs\n", r.Seed, r.Status(), r.Elapsed.Seconds())
	for _, f := range r.Faults {
		fmt.Fprintf(w, "  fault %s\n", f)
	}
	v := r.Verdict
	fmt.Fprintf(w, "  acked %d (failed sends %d), consumed %d, read %d, lost %d, undelivered %d, duplicated %d, out of order %d, moved %d, bad %d\n",
		v.Acked, v.Failed, v.Consumed, v.Read, v.Lost, v.Undelivered, v.Duplicated, v.OutOfOrder, v.Moved, v.Bad)
	if v.ReplSubBefore > 0 || v.ReplSubSkipped > 0 {
		fmt.Fprintf(w, "  replicated subscription: %d received before the move, %d again after it, %d skipped\n",
			v.ReplSubBefore, v.ReplSubRedelivered, v.ReplSubSkipped)
	}
	if r.CatchUp > 0 {
		fmt.Fprintf(w, "  every cluster's subscription caught up %.1fs after the producers finished\n", r.CatchUp.Seconds())
	}
	if v.IdleEnds > 0 {
		fmt.Fprintf(w, "  reader: on %d partitions HasNext stayed true after the last message\n", v.IdleEnds)
	}
	if v.Unverified > 0 {
		fmt.Fprintf(w, "  unverified (partition not read to its end) %d\n", v.Unverified)
	}
	if v.Txns != [3]int{} {
		fmt.Fprintf(w, "  transactions: %d committed, %d aborted, %d unknown; %d not all-or-nothing\n",
			v.Txns[0], v.Txns[1], v.Txns[2], v.TxnBroken)
	}
	for _, e := range v.Examples {
		fmt.Fprintf(w, "  ! %s\n", e)
	}
	if len(r.Stuck) > 0 {
		fmt.Fprintf(w, "  stuck: %s\n", strings.Join(r.Stuck, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if r.Err != nil {
		fmt.Fprintf(w, "  error: %v\n", r.Err)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "  kept: %s\n", r.Dir)
	}
}

// PrintTable prints one line per run and the totals, with the fault mix.
func PrintTable(w io.Writer, rs []Result) {
	if slices.ContainsFunc(rs, func(r Result) bool { return r.CatchUp != 0 }) {
		printGeoTable(w, rs)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "seed\tfaults\tacked\tconsumed\tlost\tdup\tooo\ttxn c/a/?\tverdict")
	var tot Verdict
	status := map[string]int{}
	var all []Fault
	for _, r := range rs {
		v := r.Verdict
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d/%d/%d\t%s\n", r.Seed, FaultMix(r.Faults), v.Acked, v.Consumed,
			v.Lost, v.Duplicated, v.OutOfOrder, v.Txns[0], v.Txns[1], v.Txns[2], r.Status())
		tot.Acked += v.Acked
		tot.Consumed += v.Consumed
		tot.Lost += v.Lost
		tot.Duplicated += v.Duplicated
		tot.OutOfOrder += v.OutOfOrder
		for i := range tot.Txns {
			tot.Txns[i] += v.Txns[i]
		}
		status[r.Status()]++
		all = append(all, r.Faults...)
	}
	var ss []string
	for k, n := range status {
		ss = append(ss, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ss)
	fmt.Fprintf(tw, "total %d runs\t%d faults\t%d\t%d\t%d\t%d\t%d\t%d/%d/%d\t%s\n", len(rs), len(all), tot.Acked, tot.Consumed,
		tot.Lost, tot.Duplicated, tot.OutOfOrder, tot.Txns[0], tot.Txns[1], tot.Txns[2], strings.Join(ss, ", "))
	tw.Flush()
	fmt.Fprintf(w, "fault mix: %s\n", FaultMix(all))
}

// printGeoTable is PrintTable for runs across clusters: the counts add up over the clusters
// (Verdict), the replicated subscription's skipped and redelivered messages, and how long
// the subscriptions took to catch up after the producers finished.
func printGeoTable(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "seed\tfaults\tacked\tconsumed\tlost\tdup\tooo\trs skipped/again\tcatch-up\tverdict")
	var tot Verdict
	status := map[string]int{}
	var all []Fault
	var catchUps []time.Duration
	for _, r := range rs {
		v := r.Verdict
		cu := "-"
		if r.CatchUp > 0 {
			cu = fmt.Sprintf("%.1fs", r.CatchUp.Seconds())
			catchUps = append(catchUps, r.CatchUp)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%s\t%s\n", r.Seed, FaultMix(r.Faults), v.Acked, v.Consumed,
			v.Lost, v.Duplicated, v.OutOfOrder, v.ReplSubSkipped, v.ReplSubRedelivered, cu, r.Status())
		tot.Acked += v.Acked
		tot.Consumed += v.Consumed
		tot.Lost += v.Lost
		tot.Duplicated += v.Duplicated
		tot.OutOfOrder += v.OutOfOrder
		tot.ReplSubSkipped += v.ReplSubSkipped
		tot.ReplSubRedelivered += v.ReplSubRedelivered
		status[r.Status()]++
		all = append(all, r.Faults...)
	}
	var ss []string
	for k, n := range status {
		ss = append(ss, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ss)
	cu := "-"
	if len(catchUps) > 0 {
		slices.Sort(catchUps)
		cu = fmt.Sprintf("median %.1fs, max %.1fs", catchUps[len(catchUps)/2].Seconds(), catchUps[len(catchUps)-1].Seconds())
	}
	fmt.Fprintf(tw, "total %d runs\t%d faults\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%s\t%s\n", len(rs), len(all), tot.Acked, tot.Consumed,
		tot.Lost, tot.Duplicated, tot.OutOfOrder, tot.ReplSubSkipped, tot.ReplSubRedelivered, cu, strings.Join(ss, ", "))
	tw.Flush()
	fmt.Fprintf(w, "fault mix: %s\n", FaultMix(all))
}
