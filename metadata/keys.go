package metadata

import "fmt"

// Key layout. Every key Magnetar writes to the metadata store is built by a function in this
// file, so the whole layout is documented in one place. The store itself may add a
// cluster-wide prefix (the etcd namespace, see Config.Namespace).
//
//	/cluster/instance                  cluster instance id (written once at first start)
//	/counters/<name>                   monotonic counters (NextID), e.g. ledger ids
//	/bookies/available/<id>            ephemeral: bookie <id> is up and writable (value: BookieInfo JSON)
//	/bookies/readonly/<id>             ephemeral: bookie <id> is up and read-only (value: BookieInfo JSON)
//	/bookies/cookies/<id>              cookie of bookie <id> (value: Cookie JSON)
//	/ledgers/<20-digit id>             ledger metadata record (value: JSON, written by CAS)
const (
	KeyClusterInstance = "/cluster/instance"
	PrefixCounters     = "/counters/"
	PrefixAvailable    = "/bookies/available/"
	PrefixReadOnly     = "/bookies/readonly/"
	PrefixCookies      = "/bookies/cookies/"
	PrefixLedgers      = "/ledgers/"

	// CounterLedgerID is the NextID counter that hands out ledger ids.
	CounterLedgerID = "ledger-id"
)

// CounterKey is the key of the named counter.
func CounterKey(name string) string { return PrefixCounters + name }

// AvailableBookieKey marks bookie id as writable.
func AvailableBookieKey(id string) string { return PrefixAvailable + id }

// ReadOnlyBookieKey marks bookie id as read-only.
func ReadOnlyBookieKey(id string) string { return PrefixReadOnly + id }

// CookieKey holds bookie id's cookie.
func CookieKey(id string) string { return PrefixCookies + id }

// LedgerKey holds the metadata of ledger id. Ids are zero-padded so keys sort numerically.
func LedgerKey(id int64) string { return fmt.Sprintf("%s%020d", PrefixLedgers, id) }

// LedgerIDFromKey parses a key built by LedgerKey.
func LedgerIDFromKey(key string) (int64, error) {
	var id int64
	if _, err := fmt.Sscanf(key, PrefixLedgers+"%d", &id); err != nil {
		return 0, fmt.Errorf("metadata: not a ledger key %q: %w", key, err)
	}
	return id, nil
}
