package pulsarclient

import (
	"fmt"
	"strconv"
	"strings"
)

// fullTopicName normalises a topic name as Pulsar clients do: "t" → persistent://public/default/t,
// "a/b/t" → persistent://a/b/t; fully qualified names pass unchanged.
func fullTopicName(topic string) (string, error) {
	if topic == "" {
		return "", fmt.Errorf("pulsarclient: empty topic name")
	}
	if strings.Contains(topic, "://") {
		return topic, nil
	}
	switch strings.Count(topic, "/") {
	case 0:
		return "persistent://public/default/" + topic, nil
	case 2:
		return "persistent://" + topic, nil
	default:
		return "", fmt.Errorf("pulsarclient: invalid topic name %q: want topic, tenant/namespace/topic or persistent://tenant/namespace/topic", topic)
	}
}

// partitionName is the name of partition i of a partitioned topic.
func partitionName(topic string, i int) string { return topic + "-partition-" + strconv.Itoa(i) }
