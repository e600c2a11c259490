package pulsar_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func sampleBatch() ([]byte, []pulsar.SingleMessage) {
	var want []pulsar.SingleMessage
	var batch []byte
	for i := range 4 {
		smm := &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(100 + i))}
		switch i {
		case 1:
			smm.PartitionKey = proto.String("key-1")
			smm.Properties = []*pb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}}
		case 2:
			smm.OrderingKey = []byte("ord")
			smm.NullValue = proto.Bool(true)
		}
		payload := []byte(fmt.Sprintf("message %d", i))
		if i == 2 {
			payload = []byte{}
		}
		var err error
		if batch, err = pulsar.AppendBatchMessage(batch, smm, payload); err != nil {
			panic(err)
		}
		want = append(want, pulsar.SingleMessage{Metadata: smm, Payload: payload})
	}
	return batch, want
}

func TestBatchRoundTrip(t *testing.T) {
	batch, want := sampleBatch()
	meta := sampleMeta(false)
	meta.NumMessagesInBatch = proto.Int32(int32(len(want)))
	frame := encode(t, sampleCommand(pb.BaseCommand_SEND, false), meta, batch)
	f, err := pulsar.DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if !pulsar.IsBatch(f.Metadata) || pulsar.NumMessages(f.Metadata) != 4 {
		t.Fatal("not a batch of 4")
	}
	got, err := pulsar.ParseBatch(f.Payload, pulsar.NumMessages(f.Metadata))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d messages", len(got))
	}
	for i := range got {
		mustEqual(t, "single metadata", got[i].Metadata, want[i].Metadata)
		if !bytes.Equal(got[i].Payload, want[i].Payload) || int(got[i].Metadata.GetPayloadSize()) != len(want[i].Payload) {
			t.Fatalf("message %d payload %q", i, got[i].Payload)
		}
	}
	if got[1].Metadata.GetPartitionKey() != "key-1" {
		t.Fatal("routing key lost")
	}

	single := &pb.MessageMetadata{}
	if pulsar.IsBatch(single) || pulsar.NumMessages(single) != 1 {
		t.Fatal("a non-batch entry")
	}
}

func TestParseBatchMalformed(t *testing.T) {
	batch, want := sampleBatch()
	n := len(want)
	rec := func(smm []byte, payload string) []byte {
		return slices.Concat(binary.BigEndian.AppendUint32(nil, uint32(len(smm))), smm, []byte(payload))
	}
	neg, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(-1)})
	big, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(100)})
	cases := map[string]struct {
		b []byte
		n int
	}{
		"zero messages":        {batch, 0},
		"negative count":       {batch, -1},
		"count beyond size":    {batch, len(batch)},
		"one more than there":  {batch, n + 1},
		"one fewer":            {batch, n - 1},
		"trailing byte":        {append(slices.Clone(batch), 0), n},
		"cut short":            {batch[:len(batch)-1], n},
		"empty":                {nil, 1},
		"smm size too large":   {[]byte{0, 0, 1, 0, 0x18, 0, 0, 0}, 1},
		"garbage smm":          {rec([]byte{0xff, 0xff}, "xxxx"), 1},
		"missing payload_size": {rec(partial(&pb.SingleMessageMetadata{PartitionKey: proto.String("k")}), ""), 1},
		"negative payload":     {rec(neg, "xxxxxx"), 1},
		"payload beyond":       {rec(big, "xxxxxx"), 1},
	}
	for name, tc := range cases {
		if _, err := pulsar.ParseBatch(tc.b, tc.n); !errors.Is(err, pulsar.ErrMalformed) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func BenchmarkParseBatch100(b *testing.B) {
	var batch []byte
	for i := range 100 {
		smm := &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(i)), PartitionKey: proto.String("k")}
		batch, _ = pulsar.AppendBatchMessage(batch, smm, bytes.Repeat([]byte{1}, 100))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pulsar.ParseBatch(batch, 100); err != nil {
			b.Fatal(err)
		}
	}
}
