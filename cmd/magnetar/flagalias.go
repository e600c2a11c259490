package main

import "github.com/spf13/pflag"

// aliasFlag makes --alias another name of the flag --name of fs (pulsar-admin's and Pulsar
// tools' names beside Magnetar's): both set the one flag, so a config file's key and
// "flags override it" see a value given under either name.
func aliasFlag(fs *pflag.FlagSet, alias, name string) {
	prev := fs.GetNormalizeFunc()
	fs.SetNormalizeFunc(func(f *pflag.FlagSet, n string) pflag.NormalizedName {
		if n == alias {
			n = name
		}
		return prev(f, n)
	})
}
