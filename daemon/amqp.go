package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQPSender publishes outbox rows to a RabbitMQ exchange as persistent messages and counts a
// row sent only when the broker confirmed it (publisher confirms): a nack, a timeout or a lost
// connection leave the row to the relay's retry, which republishes under the same message id
// (the downstream key). Consumers dedupe by business key, so a republish is harmless.
type AMQPSender struct {
	// URL is the broker; Exchange and RoutingKey where every row goes.
	URL        string
	Exchange   string
	RoutingKey string
	// Setup, when set, runs on every new channel before the first publish (declare the
	// exchange, and the consumers' queues and bindings, so nothing is published into the void).
	Setup func(*amqp.Channel) error

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel
}

// Send publishes payload with MessageId = downstreamKey and waits for the broker's confirm.
func (s *AMQPSender) Send(ctx context.Context, downstreamKey string, payload []byte) error {
	ch, err := s.channel()
	if err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, s.Exchange, s.RoutingKey, false, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    downstreamKey,
		Timestamp:    time.Now().UTC(),
		Body:         payload,
	})
	if err != nil {
		s.reset(ch)
		return fmt.Errorf("publish to %s: %w", s.Exchange, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		s.reset(ch)
		return fmt.Errorf("publish to %s: no confirm: %w", s.Exchange, err)
	}
	if !ok {
		return fmt.Errorf("publish to %s: the broker nacked the message", s.Exchange)
	}
	return nil
}

// channel returns the open confirm-mode channel, connecting when there is none.
func (s *AMQPSender) channel() (*amqp.Channel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil && !s.ch.IsClosed() && !s.conn.IsClosed() {
		return s.ch, nil
	}
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn, s.ch = nil, nil
	}
	conn, err := amqp.DialConfig(s.URL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("connect to the broker: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil && s.Setup != nil {
		err = s.Setup(ch)
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("broker channel: %w", err)
	}
	s.conn, s.ch = conn, ch
	return ch, nil
}

// reset drops ch after a failure, so that the next Send reconnects.
func (s *AMQPSender) reset(ch *amqp.Channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == ch && s.conn != nil {
		_ = s.conn.Close()
		s.conn, s.ch = nil, nil
	}
}

// Close closes the connection.
func (s *AMQPSender) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn, s.ch = nil, nil
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
