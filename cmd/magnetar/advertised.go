package main

import (
	"fmt"
	"net"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/config"
)

// advertisedFlags are the broker's and standalone's advertised-address settings (Pulsar's
// advertisedAddress, advertisedListeners, internalListenerName).
type advertisedFlags struct {
	address, listeners, internal string
	parsed                       []broker.Listener
}

func (a *advertisedFlags) add(f *pflag.FlagSet, addressDefault string) {
	f.StringVar(&a.address, "advertised-address", "",
		"host advertised in every URL the broker hands out (lookups, redirects, its record); default: "+addressDefault)
	f.StringVar(&a.listeners, "advertised-listeners", "",
		"named listeners, name:pulsar://host:port,name:pulsar+ssl://host:port,… (lookups answer the listener the client names)")
	f.StringVar(&a.internal, "internal-listener-name", "", "the listener of clients naming none and of the broker record (default: the first)")
}

// advertisedKeys are the Pulsar keys of advertisedFlags.
var advertisedKeys = []config.Key{
	{Name: "advertisedAddress", Flag: "advertised-address"},
	{Name: "advertisedListeners", Flag: "advertised-listeners"},
	{Name: "internalListenerName", Flag: "internal-listener-name"},
}

// check parses the listeners and refuses what Pulsar refuses.
func (a *advertisedFlags) check() error {
	if a.listeners == "" {
		if a.internal != "" {
			return usageError{fmt.Errorf("--internal-listener-name needs --advertised-listeners")}
		}
		return nil
	}
	if a.address != "" {
		return usageError{fmt.Errorf("--advertised-listeners and --advertised-address must not appear together")}
	}
	ls, err := broker.ParseAdvertisedListeners(a.listeners)
	if err != nil {
		return usageError{fmt.Errorf("--advertised-listeners: %w", err)}
	}
	a.parsed = ls
	return nil
}

func (a *advertisedFlags) apply(bc *broker.Config) {
	bc.AdvertisedAddress, bc.AdvertisedListeners, bc.InternalListenerName = a.address, a.parsed, a.internal
}

// standaloneAdvertised defaults standalone's advertised address as Pulsar's standalone
// does: localhost, where a listener is bound to a wildcard address and neither an address
// nor named listeners are given (a listener bound to a specific address advertises it).
func (a *advertisedFlags) standaloneDefault(addrs ...string) {
	if a.address != "" || a.listeners != "" {
		return
	}
	for _, hp := range addrs {
		h, _, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
			a.address = "localhost"
			return
		}
	}
}
