package chaos

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The checker reads only the clients' record files: it shares no code with the broker. A
// message is known by its producer name and sequence id (its key); where it was stored by
// its message id.

type msgKey struct {
	producer string
	seq      int64
}

type msgID struct {
	ledger, entry    int64
	batch, partition int32
}

func (id msgID) dupReceipt() bool { return id.ledger < 0 || id.entry < 0 }

// Verdict is the outcome of the checks of one run.
type Verdict struct {
	Acked       int // distinct messages whose send was acknowledged
	Failed      int // sends that failed (not acknowledged)
	Read        int // distinct messages a reader found stored
	Consumed    int // distinct messages the subscription delivered
	Lost        int // acknowledged, not stored
	Undelivered int // acknowledged, never delivered to the subscription
	Duplicated  int // stored under two or more message ids
	OutOfOrder  int // stored after a higher sequence id of the same producer on the same partition
	Moved       int // acknowledged with one message id, stored under another
	Bad         int // unreadable records or payloads not matching their properties
	Unverified  int // acknowledged on a partition the reader could not read to its end
	IdleEnds    int // partitions where HasNext stayed true after the last message (not a loss)
	TxnBroken   int // transactions not all-or-nothing
	Txns        [3]int
	// A replicated subscription moved between clusters (CheckReplSub): messages its first
	// consumer received; messages stored in the second cluster that the first never
	// received and the second consumer did not get either (its position was carried past
	// them); messages both consumers got (allowed: at most since the last snapshot).
	ReplSubBefore, ReplSubSkipped, ReplSubRedelivered int
	Examples                                          []string // a few instances of each violation
}

// Failed reports whether any safety check failed.
func (v Verdict) Broken() bool {
	return v.Lost+v.Undelivered+v.Duplicated+v.OutOfOrder+v.Moved+v.Bad+v.TxnBroken+v.ReplSubSkipped > 0
}

func (v *Verdict) example(format string, a ...any) {
	if len(v.Examples) < 12 {
		v.Examples = append(v.Examples, fmt.Sprintf(format, a...))
	}
}

func parseID(fs []string) (msgID, error) {
	if len(fs) < 4 {
		return msgID{}, fmt.Errorf("short message id %q", fs)
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(fs[i], 10, 64)
		if err != nil {
			return msgID{}, err
		}
		n[i] = v
	}
	return msgID{ledger: n[0], entry: n[1], batch: int32(n[2]), partition: int32(n[3])}, nil
}

func scanLines(path string, f func(fs []string) error) error {
	file, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 0 {
			if err := f(fs); err != nil {
				return fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
			}
		}
	}
	return sc.Err()
}

// stored is what a reader or consumer record says: each message's ids in the order seen.
type stored struct {
	order []struct {
		key msgKey
		id  msgID
	}
	ids      map[msgKey]map[msgID]bool
	bad      int
	complete map[int32]bool // partitions read to their end (reader records only)
	idleEnds int            // partitions whose end the reader had to infer (HasNext stayed true)
}

func readStored(path string) (*stored, error) {
	s := &stored{ids: map[msgKey]map[msgID]bool{}, complete: map[int32]bool{}}
	err := scanLines(path, func(fs []string) error {
		switch fs[0] {
		case "end":
			if p, err := strconv.Atoi(fs[1]); err == nil {
				s.complete[int32(p)] = true
			}
			if len(fs) > 2 && fs[2] == "idle" {
				s.idleEnds++
			}
		case "bad":
			s.bad++
		case "msg":
			if len(fs) < 7 {
				return fmt.Errorf("short record")
			}
			seq, err := strconv.ParseInt(fs[2], 10, 64)
			if err != nil {
				return err
			}
			id, err := parseID(fs[3:])
			if err != nil {
				return err
			}
			k := msgKey{fs[1], seq}
			if s.ids[k] == nil {
				s.ids[k] = map[msgID]bool{}
			}
			s.ids[k][id] = true
			s.order = append(s.order, struct {
				key msgKey
				id  msgID
			}{k, id})
		}
		return nil
	})
	return s, err
}

// CheckFiles checks a run's records: the producers' (ack lines), the transactional
// producers', the subscription's consumer and the final reader's. With partitions > 0, a
// message counts as lost only if the reader read its partition to the end; transactions are
// checked only if it read every partition.
func CheckFiles(producerFiles, txnFiles []string, consumerFile, readerFile string, partitions int) (Verdict, error) {
	var v Verdict
	acked := map[msgKey]acks{}
	if err := readAcks(producerFiles, "", acked, &v); err != nil {
		return v, err
	}
	read, err := readStored(readerFile)
	if err != nil {
		return v, err
	}
	consumed, err := readStored(consumerFile)
	if err != nil {
		return v, err
	}
	v.Acked = len(acked)
	checkStored(&v, "", acked, read, consumed, partitions)
	if len(read.complete) < partitions {
		return v, nil
	}
	for _, tf := range txnFiles {
		if err := checkTxns(tf, read, &v); err != nil {
			return v, err
		}
	}
	return v, nil
}

// SiteFiles are the records of one cluster of a run across clusters.
type SiteFiles struct {
	Cluster   string
	Producers []string // the records of the producers publishing in this cluster
	Consumer  string   // its subscription's consumer
	Reader    string   // its final reader
}

// CheckGeo checks a run across clusters: every message acknowledged to a producer in any
// cluster must be stored in every cluster exactly once (lost, duplicated), in per-producer
// order on each partition (out of order), and delivered to every cluster's subscription
// (undelivered); in its own cluster under the message id its receipt gave (moved). The
// counts add up over the clusters (a message missing in two clusters counts twice); Acked
// counts each message once. With partitions > 0, a message counts as lost in a cluster
// only if that cluster's reader read its partition to the end.
func CheckGeo(sites []SiteFiles, partitions int) (Verdict, error) {
	var v Verdict
	acked := map[msgKey]acks{}
	for _, s := range sites {
		if err := readAcks(s.Producers, s.Cluster, acked, &v); err != nil {
			return v, err
		}
	}
	v.Acked = len(acked)
	for _, s := range sites {
		read, err := readStored(s.Reader)
		if err != nil {
			return v, err
		}
		consumed, err := readStored(s.Consumer)
		if err != nil {
			return v, err
		}
		checkStored(&v, s.Cluster, acked, read, consumed, partitions)
	}
	return v, nil
}

// CheckReplSub checks a replicated subscription whose consumer moved from one cluster to
// another: before is the record of its consumer in the first cluster (what it received and
// acknowledged until it stopped), after the record of its consumer in the second, stored
// the record of a reader of the second cluster. A message stored there that the first
// consumer never received was never acknowledged, so no snapshot the subscription's
// position passed can cover it: the second consumer must get it (else ReplSubSkipped).
// Messages both consumers got are counted (ReplSubRedelivered), not failed: the position
// moves only to the last snapshot the first cluster's position passed.
func CheckReplSub(before, after, stored string, v *Verdict) error {
	b, err := readStored(before)
	if err != nil {
		return err
	}
	a, err := readStored(after)
	if err != nil {
		return err
	}
	st, err := readStored(stored)
	if err != nil {
		return err
	}
	v.ReplSubBefore = len(b.ids)
	for k := range st.ids {
		switch {
		case len(b.ids[k]) == 0 && len(a.ids[k]) == 0:
			v.ReplSubSkipped++
			v.example("replicated subscription: %s seq %d never received before the move, skipped after it", k.producer, k.seq)
		case len(b.ids[k]) > 0 && len(a.ids[k]) > 0:
			v.ReplSubRedelivered++
		}
	}
	return nil
}

// missingFrom counts the messages of the record storedFile that the records got lack.
func missingFrom(storedFile string, got ...string) (int, error) {
	st, err := readStored(storedFile)
	if err != nil {
		return 0, err
	}
	var gs []*stored
	for _, g := range got {
		r, err := readStored(g)
		if err != nil {
			return 0, err
		}
		gs = append(gs, r)
	}
	n := 0
	for k := range st.ids {
		if !slices.ContainsFunc(gs, func(r *stored) bool { return len(r.ids[k]) > 0 }) {
			n++
		}
	}
	return n, nil
}

// acks are the message ids one message's sends were acknowledged with, and the cluster it
// was published in.
type acks struct {
	ids     []msgID
	cluster string
}

// readAcks adds the acknowledged sends of producer records to acked.
func readAcks(producerFiles []string, cluster string, acked map[msgKey]acks, v *Verdict) error {
	for _, pf := range producerFiles {
		name := ""
		err := scanLines(pf, func(fs []string) error {
			switch fs[0] {
			case "name":
				name = fs[1]
			case "ack":
				seq, err := strconv.ParseInt(fs[1], 10, 64)
				if err != nil {
					return err
				}
				id, err := parseID(fs[2:])
				if err != nil {
					return err
				}
				k := msgKey{name, seq}
				a := acked[k]
				a.ids, a.cluster = append(a.ids, id), cluster
				acked[k] = a
			case "fail":
				v.Failed++
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// checkStored checks one cluster's reader and consumer records against the acknowledged
// messages; message ids are compared only for messages published in that cluster.
func checkStored(v *Verdict, cluster string, acked map[msgKey]acks, read, consumed *stored, partitions int) {
	in := ""
	if cluster != "" {
		in = "in " + cluster + ": "
	}
	v.Read += len(read.ids)
	v.Consumed += len(consumed.ids)
	v.Bad += read.bad + consumed.bad
	v.IdleEnds += read.idleEnds
	for k, a := range acked {
		ids := a.ids
		got := read.ids[k]
		if len(got) == 0 && partitions > 0 && !read.complete[ids[0].partition] {
			v.Unverified++
			continue
		}
		if len(got) == 0 {
			v.Lost++
			v.example("%slost: %s seq %d acked as %v", in, k.producer, k.seq, ids)
			continue
		}
		if len(consumed.ids[k]) == 0 {
			v.Undelivered++
			v.example("%sundelivered: %s seq %d", in, k.producer, k.seq)
		}
		if a.cluster != cluster {
			continue // stored under the remote cluster's own message id
		}
		for _, id := range ids {
			if !id.dupReceipt() && !got[id] {
				v.Moved++
				v.example("%smoved: %s seq %d acked as %v, stored as %v", in, k.producer, k.seq, id, got)
			}
		}
	}
	for k, ids := range read.ids {
		if len(ids) > 1 {
			v.Duplicated++
			v.example("%sduplicated: %s seq %d stored as %v", in, k.producer, k.seq, ids)
		}
	}
	// Per-producer order on each partition, in the order the reader found the messages.
	type lane struct {
		producer  string
		partition int32
	}
	last := map[lane]int64{}
	for _, m := range read.order {
		l := lane{m.key.producer, m.id.partition}
		if prev, ok := last[l]; ok && m.key.seq <= prev {
			v.OutOfOrder++
			v.example("%sout of order: %s partition %d seq %d after %d", in, l.producer, l.partition, m.key.seq, prev)
		}
		last[l] = max(last[l], m.key.seq)
	}
}

// checkTxns checks that each transaction's messages are stored all or none: all for a
// committed one, none for an aborted one or one never asked to commit, all or none when the
// commit's outcome is unknown.
func checkTxns(path string, read *stored, v *Verdict) error {
	type txn struct {
		first, last int64
		verb        string
		outcome     string
	}
	name := ""
	txns := map[string]*txn{}
	var order []string
	err := scanLines(path, func(fs []string) error {
		switch fs[0] {
		case "name":
			name = fs[1]
		case "begin", "txn":
			if len(fs) < 4 {
				return fmt.Errorf("short record")
			}
			t := txns[fs[1]]
			if t == nil {
				t = &txn{}
				txns[fs[1]] = t
				order = append(order, fs[1])
			}
			i := 2
			if fs[0] == "txn" {
				t.verb = fs[2]
				i = 3
			}
			first, err1 := strconv.ParseInt(fs[i], 10, 64)
			last, err2 := strconv.ParseInt(fs[i+1], 10, 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("bad sequence ids")
			}
			t.first, t.last = first, last
		case "outcome":
			if t := txns[fs[1]]; t != nil && len(fs) > 2 {
				t.outcome = fs[2]
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range order {
		t := txns[id]
		n := 0
		for s := t.first; s <= t.last; s++ {
			if len(read.ids[msgKey{name, s}]) > 0 {
				n++
			}
		}
		size := int(t.last - t.first + 1)
		switch {
		case t.verb == "commit" && t.outcome == "committed":
			v.Txns[0]++
			if n != size {
				v.TxnBroken++
				v.example("txn %s committed: %d of %d messages stored", id, n, size)
			}
		case t.verb == "commit":
			v.Txns[2]++
			if n != 0 && n != size {
				v.TxnBroken++
				v.example("txn %s commit outcome %q: %d of %d messages stored", id, t.outcome, n, size)
			}
		default:
			v.Txns[1]++
			if n != 0 {
				v.TxnBroken++
				v.example("txn %s not committed (%s %s): %d of %d messages visible", id, t.verb, t.outcome, n, size)
			}
		}
	}
	return nil
}
