package pulsarmetrics

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// PublishLatencyName is the broker's histogram of the time from handing an entry to the
// managed ledger to its completion (package broker/topic), which is what Pulsar's storage
// write latency measures.
const PublishLatencyName = "magnetar_broker_publish_latency_seconds"

// Histogram is a cumulative histogram: Cumulative[i] observations were at most Bounds[i]
// (ascending upper bounds, in seconds); Count and Sum (seconds) cover every observation.
type Histogram struct {
	Bounds     []float64
	Cumulative []uint64
	Count      uint64
	Sum        float64
}

// LatencySource gives a latency histogram at scrape time.
type LatencySource interface {
	// Histogram returns the cumulative histogram since the start (ok false: none).
	Histogram() (h Histogram, ok bool)
}

// Tap is a prometheus.Registerer that registers on another and keeps the histogram of one
// name, so a Collector can read it at scrape time without a second registration. It is
// safe for concurrent use.
type Tap struct {
	prometheus.Registerer
	name string

	mu struct {
		sync.Mutex // guards h
		h          prometheus.Histogram
	}
}

var _ LatencySource = (*Tap)(nil)

// NewTap returns a Tap registering on r and keeping the histogram named name.
func NewTap(r prometheus.Registerer, name string) *Tap { return &Tap{Registerer: r, name: name} }

// Register registers c on the underlying Registerer; if c is the histogram the Tap keeps,
// the Tap remembers it.
func (t *Tap) Register(c prometheus.Collector) error {
	if err := t.Registerer.Register(c); err != nil {
		return err
	}
	if h, ok := c.(prometheus.Histogram); ok && descName(h.Desc()) == t.name {
		t.mu.Lock()
		t.mu.h = h
		t.mu.Unlock()
	}
	return nil
}

// MustRegister registers cs as Register does and panics on an error, as
// prometheus.Registry.MustRegister does.
func (t *Tap) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

// Histogram implements LatencySource.
func (t *Tap) Histogram() (Histogram, bool) {
	t.mu.Lock()
	h := t.mu.h
	t.mu.Unlock()
	if h == nil {
		return Histogram{}, false
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return Histogram{}, false
	}
	out := Histogram{Count: m.Histogram.GetSampleCount(), Sum: m.Histogram.GetSampleSum()}
	for _, b := range m.Histogram.GetBucket() {
		if math.IsInf(b.GetUpperBound(), +1) {
			continue
		}
		out.Bounds = append(out.Bounds, b.GetUpperBound())
		out.Cumulative = append(out.Cumulative, b.GetCumulativeCount())
	}
	return out, true
}

// descName returns the fully-qualified name of d (client_golang gives no accessor; its
// String form is `Desc{fqName: "name", …}`).
func descName(d *prometheus.Desc) string {
	_, s, ok := strings.Cut(d.String(), `fqName: "`)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(s, `"`)
	return name
}

// window keeps the increase of a cumulative histogram over the last complete stats period,
// as Pulsar's StatsBuckets refresh every statsUpdateFrequencyInSecs. It is not safe for
// concurrent use.
type window struct {
	every time.Duration
	start time.Time // start of the period in progress
	mark  Histogram // the cumulative histogram at start (zero: nothing observed)
	last  Histogram // the increase over the last complete period
}

// newWindow starts the first period at now, from an empty histogram.
func newWindow(now time.Time, every time.Duration) *window { return &window{every: every, start: now} }

// observe notes that the histogram is cum at now and returns the increase over the last
// complete period: a period ends at the first observation at least every after its start.
func (w *window) observe(now time.Time, cum Histogram) Histogram {
	if now.Sub(w.start) >= w.every {
		w.last = cum.minus(w.mark)
		w.mark, w.start = cum, now
	}
	return w.last
}

// minus returns h − o bucket by bucket (o empty: h); a bucket that went down (the source
// was reset) counts from zero.
func (h Histogram) minus(o Histogram) Histogram {
	d := Histogram{Bounds: h.Bounds, Cumulative: make([]uint64, len(h.Cumulative))}
	sub := func(a, b uint64) uint64 {
		if b > a {
			return a
		}
		return a - b
	}
	for i, c := range h.Cumulative {
		if i < len(o.Cumulative) {
			d.Cumulative[i] = sub(c, o.Cumulative[i])
		} else {
			d.Cumulative[i] = c
		}
	}
	d.Count = sub(h.Count, o.Count)
	d.Sum = h.Sum - o.Sum
	if d.Sum < 0 {
		d.Sum = h.Sum
	}
	return d
}

// cumulativeAt returns the observations at most x seconds, interpolated linearly within
// the bucket x falls in (beyond the last finite bound: the count at that bound).
func (h Histogram) cumulativeAt(x float64) float64 {
	lo, loC := 0.0, 0.0
	for i, b := range h.Bounds {
		c := float64(h.Cumulative[i])
		if x <= b {
			if b <= lo {
				return c
			}
			return loC + (c-loC)*(x-lo)/(b-lo)
		}
		lo, loC = b, c
	}
	return loC
}

// pulsarLatencyBoundsMs are Pulsar's storage write latency bounds
// (ManagedLedgerMBeanImpl.ENTRY_LATENCY_BUCKETS_USEC, in ms).
var pulsarLatencyBoundsMs = []float64{0.5, 1, 5, 10, 20, 50, 100, 200, 1000}

// Names of the storage write latency buckets, one per bound, and the overflow.
var (
	writeLatencyNames = []string{
		"pulsar_storage_write_latency_le_0_5", "pulsar_storage_write_latency_le_1", "pulsar_storage_write_latency_le_5",
		"pulsar_storage_write_latency_le_10", "pulsar_storage_write_latency_le_20", "pulsar_storage_write_latency_le_50",
		"pulsar_storage_write_latency_le_100", "pulsar_storage_write_latency_le_200", "pulsar_storage_write_latency_le_1000",
	}
	// mlLatencyQuantiles are the quantile labels of pulsar_ml_AddEntryLatencyBuckets
	// (AbstractMetrics.Buckets: "%1.1f_%1.1f" of the ms bounds).
	mlLatencyQuantiles = []string{"0.0_0.5", "0.5_1.0", "1.0_5.0", "5.0_10.0", "10.0_20.0", "20.0_50.0",
		"50.0_100.0", "100.0_200.0", "200.0_1000.0"}
)

// pulsarBuckets returns the observations of h between Pulsar's consecutive bounds (the
// first from 0) and, last, above 1 s: Pulsar's StatsBuckets.
func pulsarBuckets(h Histogram) []uint64 {
	out := make([]uint64, 0, len(pulsarLatencyBoundsMs)+1)
	var prev uint64
	for _, ms := range pulsarLatencyBoundsMs {
		c := uint64(math.Round(h.cumulativeAt(ms / 1000)))
		c = max(c, prev) // rounding keeps the cumulative counts ascending; this makes sure
		out = append(out, c-prev)
		prev = c
	}
	over := uint64(0)
	if h.Count > prev {
		over = h.Count - prev
	}
	return append(out, over)
}

// collectLatency emits the broker-wide latency families of the last stats period.
func (c *Collector) collectLatency(e emitter) {
	if c.cfg.Latency == nil {
		return
	}
	cum, ok := c.cfg.Latency.Histogram()
	if !ok {
		return
	}
	c.mu.Lock()
	d := c.mu.latency.observe(c.cfg.Now(), cum)
	c.mu.Unlock()
	cl := c.cfg.Cluster
	b := pulsarBuckets(d)
	for i, n := range writeLatencyNames {
		e.emit(n, lCluster, float64(b[i]), cl)
	}
	over := b[len(b)-1]
	e.emit("pulsar_storage_write_latency_overflow", lCluster, float64(over), cl)
	e.emit("pulsar_storage_write_latency_count", lCluster, float64(d.Count), cl)
	e.emit("pulsar_storage_write_latency_sum", lCluster, d.Sum*1e6, cl)
	per := c.cfg.StatsPeriod.Seconds()
	for i, q := range mlLatencyQuantiles {
		e.emit("pulsar_ml_AddEntryLatencyBuckets", lMLQuantile, float64(b[i])/per, cl, q)
	}
	e.emit("pulsar_ml_AddEntryLatencyBuckets_OVERFLOW", lCluster, float64(over)/per, cl)
}
