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
	h := &handler{expect: *expect, done: make(chan struct{})}
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
	cancel()
	<-finished
	if err := consumer.Close(); err != nil { // commits what was marked
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "read %d messages\n", h.seen)
}
