package topic

import (
	"testing"
	"time"
)

// TestSubscribeWindows: a consumer gets rate subscribes per period, counted apart from the
// others, and rate more once its period has passed.
func TestSubscribeWindows(t *testing.T) {
	var w subscribeWindows
	t0 := time.Unix(1000, 0)
	a, b := consumerKey{host: "10.0.0.1", name: "c", id: 1}, consumerKey{host: "10.0.0.2", name: "c", id: 1}
	for i := 0; i < 2; i++ {
		if !w.take(a, 2, 10*time.Second, t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("subscribe %d of 2 refused", i+1)
		}
	}
	if w.take(a, 2, 10*time.Second, t0.Add(9*time.Second)) {
		t.Fatal("third subscribe within the period admitted")
	}
	if !w.take(b, 2, 10*time.Second, t0.Add(9*time.Second)) {
		t.Fatal("another host's consumer of the same name and id refused")
	}
	if !w.take(a, 2, 10*time.Second, t0.Add(10*time.Second)) {
		t.Fatal("subscribe after the period refused")
	}
}
