package config

import (
	"errors"
	"strconv"
	"time"
)

// Not maps a Pulsar boolean to a flag that means its opposite (e.g.
// brokerDeduplicationEnabled to --disable-deduplication).
func Not(v string, _ func(string) (string, bool)) (string, error) {
	if v == "" {
		return "", Skip
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return "", errors.New("want true or false")
	}
	return strconv.FormatBool(!b), nil
}

// Millis maps a number of milliseconds to a duration flag.
func Millis(v string, _ func(string) (string, bool)) (string, error) {
	return scaled(v, time.Millisecond, "milliseconds")
}

// Seconds maps a number of seconds to a duration flag.
func Seconds(v string, _ func(string) (string, bool)) (string, error) {
	return scaled(v, time.Second, "seconds")
}

// Minutes maps a number of minutes to a duration flag.
func Minutes(v string, _ func(string) (string, bool)) (string, error) {
	return scaled(v, time.Minute, "minutes")
}

func scaled(v string, unit time.Duration, name string) (string, error) {
	if v == "" {
		return "", Skip
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > int64(1<<62)/int64(unit) {
		return "", errors.New("want a non-negative number of " + name)
	}
	return (time.Duration(n) * unit).String(), nil
}
