// Readers of one group with segmentio/kafka-go 0.2, a test fixture of the gateway
// (tests/test_gateway_go_clients.py): -readers readers join -group and read -topic from the
// committed offsets (the first offset without one), commit every message and print it once
// committed (one JSON line: reader, partition, offset, value); the program exits once -expect messages were read
// between them, closing the readers (each leaves the group).
//
// kafka-go 0.2 sends JoinGroup v1, SyncGroup v0, OffsetCommit v2, OffsetFetch v1, Metadata v1,
// ListOffsets v1 and Fetch v2, and reads message sets of magic 0/1 only. Built with Debian's
// golang-go and golang-github-segmentio-kafka-go-dev in GOPATH mode.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma separated")
	topic := flag.String("topic", "", "the topic")
	group := flag.String("group", "", "the group id")
	readers := flag.Int("readers", 2, "readers in the group")
	expect := flag.Int("expect", 1, "exit after this many messages, between all readers")
	timeout := flag.Duration("timeout", 90*time.Second, "give up after this long")
	flag.Parse()
	log.SetOutput(os.Stderr)

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var mu sync.Mutex
	seen := 0
	out := json.NewEncoder(os.Stdout)
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	all := make([]*kafka.Reader, *readers)
	for i := range all {
		all[i] = kafka.NewReader(kafka.ReaderConfig{
			Brokers:           strings.Split(*brokers, ","),
			GroupID:           *group,
			Topic:             *topic,
			MinBytes:          1,
			MaxBytes:          1 << 20,
			MaxWait:           200 * time.Millisecond,
			HeartbeatInterval: time.Second,
			SessionTimeout:    10 * time.Second,
			RebalanceTimeout:  10 * time.Second,
			ErrorLogger:       log.New(os.Stderr, "[kafka-go] ", log.LstdFlags),
		})
		wg.Add(1)
		go func(id int, r *kafka.Reader) {
			defer wg.Done()
			for {
				msg, err := r.FetchMessage(ctx)
				if err != nil {
					return // the context ended
				}
				if err := r.CommitMessages(ctx, msg); err != nil {
					// a rebalance under way: the partition's next owner (this reader
					// again, maybe) reads it from the last commit, so it is printed then
					log.Printf("reader %d: commit of %d/%d: %v", id, msg.Partition, msg.Offset, err)
					continue
				}
				mu.Lock()
				_ = out.Encode(map[string]interface{}{
					"reader": id, "partition": msg.Partition, "offset": msg.Offset,
					"value": string(msg.Value),
				})
				seen++
				if seen >= *expect {
					once.Do(func() { close(done) })
				}
				mu.Unlock()
			}
		}(i, all[i])
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		log.Fatalf("read %d of %d messages in %v", seen, *expect, *timeout)
	}
	cancel()
	wg.Wait()
	for _, r := range all {
		if err := r.Close(); err != nil {
			log.Printf("close: %v", err)
		}
	}
	log.Printf("read %d messages", seen)
}
