package interop

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserPage is the page the browser test loads: its run(n) opens a consumer and a
// producer socket on the page's own origin, publishes n UTF-8 messages with properties,
// acknowledges each message it receives, and reports what it saw.
const browserPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>magnetar websocket</title></head><body><script>
function enc(s) { return btoa(String.fromCharCode(...new TextEncoder().encode(s))); }
function dec(b) { return new TextDecoder().decode(Uint8Array.from(atob(b), c => c.charCodeAt(0))); }
function open(url) {
  return new Promise((ok, fail) => {
    const ws = new WebSocket(url);
    ws.onopen = () => ok(ws);
    ws.onerror = () => fail(new Error('cannot open ' + url));
  });
}
async function run(n) {
  const base = location.origin.replace(/^http/, 'ws') + '/ws/v2/';
  const topic = 'persistent/public/default/browser';
  const cons = await open(base + 'consumer/' + topic + '/sub');
  const prod = await open(base + 'producer/' + topic);
  const got = [], receipts = [];
  const received = new Promise(done => {
    cons.onmessage = ev => {
      const m = JSON.parse(ev.data);
      got.push({id: m.messageId, text: dec(m.payload), i: m.properties.i});
      cons.send(JSON.stringify({messageId: m.messageId}));
      if (got.length === n) done();
    };
  });
  // At most window sends are in flight (the producer socket's queue holds 1000).
  const window = 500;
  let sent = 0;
  const send = () => {
    for (; sent < n && sent - receipts.length < window; sent++) {
      prod.send(JSON.stringify({payload: enc('héllo ' + sent + ' ✓'), properties: {i: String(sent)}, context: 'c' + sent}));
    }
  };
  const acked = new Promise(done => {
    prod.onmessage = ev => {
      receipts.push(JSON.parse(ev.data));
      if (receipts.length === n) done(); else send();
    };
  });
  send();
  await Promise.all([received, acked]);
  let bad = [];
  for (let i = 0; i < n; i++) {
    const r = receipts[i], m = got[i];
    if (r.result !== 'ok' || r.context !== 'c' + i) bad.push('receipt ' + i + ': ' + JSON.stringify(r));
    if (m.text !== 'héllo ' + i + ' ✓' || m.i !== String(i)) bad.push('message ' + i + ': ' + JSON.stringify(m));
    if (m.id !== r.messageId) bad.push('message ' + i + ': id ' + m.id + ' vs receipt ' + r.messageId);
  }
  prod.close(); cons.close();
  return JSON.stringify({received: got.length, receipts: receipts.length, bad: bad.slice(0, 5)});
}
</script></body></html>`

// chromium returns the path of a Chromium binary ("" if none).
func chromium() string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// TestWebSocketBrowser: a real browser (headless Chromium) loads a page whose JavaScript
// publishes 10,000 UTF-8 messages (at most 500 unacknowledged) through a producer socket
// and receives and acknowledges them through a consumer socket: every receipt is ok and in order, every message arrives in
// order, byte-identical (decoded as UTF-8) with its properties, under the id its receipt
// named. Skipped without Chromium unless MAGNETAR_REQUIRE_CHROMIUM=1.
func TestWebSocketBrowser(t *testing.T) {
	path := chromium()
	if path == "" {
		if os.Getenv("MAGNETAR_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("MAGNETAR_REQUIRE_CHROMIUM=1 and no chromium on PATH")
		}
		t.Skip("no chromium on PATH (apt-get install chromium)")
	}
	wc := newWSCluster(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, browserPage) //nolint:errcheck // the browser went away
	}))
	ctx := ctxT(t, 4*time.Minute)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if _, err := chromedp.Run(bctx, chromedp.Navigate(wc.srv.URL+"/")); err != nil {
		t.Fatalf("browser: %v", err)
	}
	out, err := chromedp.Run(bctx, chromedp.Evaluate[string](`run(10000)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	var res struct {
		Received, Receipts int
		Bad                []string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("page result %q: %v", out, err)
	}
	if res.Received != 10000 || res.Receipts != 10000 || len(res.Bad) > 0 {
		t.Fatalf("page result: %+v", res)
	}
}
