// A sarama consumer group member, a test fixture of the gateway (tests/test_gateway_go_clients.py):
// it joins -group, consumes -topic from the committed offsets (or the oldest without one),
// marks every message it prints (one JSON line: partition, offset, value) and exits once it
// has read -expect messages, closing the group, which commits what it marked.
//
// -version "" keeps sarama.NewConfig()'s settings, with the lowest version a consumer group
// accepts (V0_10_2_0): OffsetCommit v1 (Consumer.Offsets.Retention 0), Fetch v3, JoinGroup v1.
// Built with Debian's golang-go and golang-github-shopify-sarama-dev in GOPATH mode.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type handler struct {
	mu     sync.Mutex
	seen   int
	expect int
	done   chan struct{}
	once   sync.Once
	next   map[int32]int64 // per partition, the offset after the last message marked
}

func (h *handler) Setup(s sarama.ConsumerGroupSession) error {
	log.Printf("assigned %v (generation %d, member %s)", s.Claims(), s.GenerationID(), s.MemberID())
	return nil
}

func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	out := json.NewEncoder(os.Stdout)
	for msg := range claim.Messages() {
		h.mu.Lock()
		if err := out.Encode(map[string]interface{}{
			"partition": msg.Partition, "offset": msg.Offset, "value": string(msg.Value),
		}); err != nil {
			h.mu.Unlock()
			return err
		}
		s.MarkMessage(msg, "")
		h.next[msg.Partition] = msg.Offset + 1
		h.seen++
		if h.seen >= h.expect {
			h.once.Do(func() { close(h.done) })
		}
		h.mu.Unlock()
	}
	return nil
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma separated")
	topic := flag.String("topic", "", "the topic")
	group := flag.String("group", "", "the group id")
	version := flag.String("version", "", "sarama's Config.Version, e.g. 2.1.0 (empty: 0.10.2.0)")
	expect := flag.Int("expect", 1, "exit after this many messages")
	timeout := flag.Duration("timeout", 90*time.Second, "give up after this long")
	flag.Parse()
	log.SetOutput(os.Stderr)
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags)

	config := sarama.NewConfig()
	config.ClientID = "sarama-fixture"
	config.Version = sarama.V0_10_2_0
	if *version != "" {
		v, err := sarama.ParseKafkaVersion(*version)
		if err != nil {
			log.Fatal(err)
		}
		config.Version = v
	}
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.MaxWaitTime = 100 * time.Millisecond

	consumer, err := sarama.NewConsumerGroup(strings.Split(*brokers, ","), *group, config)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for err := range consumer.Errors() {
			log.Printf("consumer group error: %v", err)
		}
	}()
	h := &handler{expect: *expect, done: make(chan struct{}), next: map[int32]int64{}}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := consumer.Consume(ctx, []string{*topic}, h); err != nil {
				finished <- err
				return
			}
		}
		finished <- nil
	}()
	select {
	case <-h.done:
	case err := <-finished:
		log.Fatalf("consume ended early: %v", err)
	case <-time.After(*timeout):
		log.Fatalf("read %d of %d messages in %v", h.seen, *expect, *timeout)
	}
	// sarama 1.22 commits marked offsets on its interval (Consumer.Offsets.CommitInterval)
	// and may drop those still pending when the group is closed: stay in the group, as a
	// long-running consumer would, until the coordinator holds every offset marked.
	waitForCommits(strings.Split(*brokers, ","), config, *group, *topic, h, *timeout)
	cancel()
	<-finished
	if err := consumer.Close(); err != nil { // commits what was marked
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "read %d messages\n", h.seen)
}

// waitForCommits polls the group's coordinator (OffsetFetch v1) until it holds, for every
// partition read, at least the offset after the last message marked.
func waitForCommits(brokers []string, config *sarama.Config, group, topic string, h *handler, timeout time.Duration) {
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	h.mu.Lock()
	want := map[int32]int64{}
	for p, o := range h.next {
		want[p] = o
	}
	h.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		if committedAll(client, group, topic, want) {
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("the coordinator did not hold the offsets marked (%v) within %v", want, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func committedAll(client sarama.Client, group, topic string, want map[int32]int64) bool {
	coordinator, err := client.Coordinator(group)
	if err != nil {
		log.Printf("finding the coordinator: %v", err)
		return false
	}
	request := &sarama.OffsetFetchRequest{ConsumerGroup: group, Version: 1}
	for p := range want {
		request.AddPartition(topic, p)
	}
	response, err := coordinator.FetchOffset(request)
	if err != nil {
		log.Printf("fetching offsets: %v", err)
		return false
	}
	for p, offset := range want {
		block := response.GetBlock(topic, p)
		if block == nil || block.Err != sarama.ErrNoError || block.Offset < offset {
			return false
		}
	}
	return true
}
