package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ClusterRecord is the part of Pulsar's cluster record (ClusterData) a run writes.
type ClusterRecord struct {
	Name             string
	ServiceURL       string // serviceUrl: http://host:port
	BrokerServiceURL string // brokerServiceUrl: pulsar://host:port
}

// setupGeo writes, through the client's own cluster's admin API, every cluster's record,
// the tenant of the topic allowed in every cluster and its namespace replicated to every
// cluster, and creates the partitioned topic: what an operator does in each cluster when
// each has its own configuration store. It loads no topic: every cluster must have the
// partitioned topic before any replicator publishes to it (a replicator's producer would
// otherwise auto-create a partition's name as a topic of its own), so the hold
// subscriptions (roleSetup) come after every cluster's geosetup.
func setupGeo(ctx context.Context, s ClientSpec) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var names []string
	for _, r := range s.Clusters {
		names = append(names, r.Name)
	}
	name := strings.TrimPrefix(s.Topic, "persistent://")
	parts := strings.Split(name, "/")
	if len(parts) != 3 {
		return fmt.Errorf("topic %q: want persistent://tenant/ns/name", s.Topic)
	}
	tenant, ns := parts[0], parts[0]+"/"+parts[1]
	for _, r := range s.Clusters {
		path := "/admin/v2/clusters/" + r.Name
		body := map[string]string{"serviceUrl": r.ServiceURL, "brokerServiceUrl": r.BrokerServiceURL}
		code, err := adminCall(ctx, s, http.MethodPut, path, body, http.StatusConflict)
		if err == nil && code == http.StatusConflict { // it exists: make it say what this run needs
			_, err = adminCall(ctx, s, http.MethodPost, path, body)
		}
		if err != nil {
			return err
		}
	}
	steps := []struct {
		method, path string
		body         any
		also         []int
	}{
		{http.MethodPut, "/admin/v2/tenants/" + tenant, map[string]any{"allowedClusters": names, "adminRoles": []string{}}, []int{http.StatusConflict}},
		{http.MethodPut, "/admin/v2/namespaces/" + ns, map[string]any{}, []int{http.StatusConflict}},
		{http.MethodPost, "/admin/v2/namespaces/" + ns + "/replication", names, nil},
		{http.MethodPut, "/admin/v2/persistent/" + name + "/partitions", s.Partitions, []int{http.StatusConflict}},
	}
	for _, st := range steps {
		if _, err := adminCall(ctx, s, st.method, st.path, st.body, st.also...); err != nil {
			return err
		}
	}
	return nil
}

// adminCall sends a JSON admin request to the cluster's brokers in turn until one answers
// 2xx or one of the codes in also (returned), retrying on connection errors and 5xx.
func adminCall(ctx context.Context, s ClientSpec, method, path string, body any, also ...int) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	var last error
	for i := 0; ; i++ {
		u := s.AdminURLs[i%len(s.AdminURLs)] + path
		req, _ := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			rb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode/100 == 2 || slices.Contains(also, resp.StatusCode):
				return resp.StatusCode, nil
			case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusNotFound:
				// A 404 may be a broker still loading its metadata: retried.
				return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, rb)
			}
			err = fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, rb)
		}
		last = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond): // retry interval
		}
	}
}
