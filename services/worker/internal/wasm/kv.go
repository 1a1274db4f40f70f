package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// buckets holds each tenant's key-value bucket, NOETL_PLUGIN_KV_<tenant>, made at its
// first use: a plug-in reads and writes only its own tenant's.
type buckets struct {
	js       jetstream.JetStream
	replicas int

	mu sync.Mutex
	kv map[string]jetstream.KeyValue
}

var bucketSafe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// BucketName is the KV bucket of a tenant's plug-ins: NOETL_PLUGIN_KV_<tenant> for a
// tenant name of bucket-safe characters, else NOETL_PLUGIN_KV_H<hex of its SHA-256>.
func BucketName(tenant string) string {
	if bucketSafe.MatchString(tenant) {
		return "NOETL_PLUGIN_KV_" + tenant
	}
	sum := sha256.Sum256([]byte(tenant))
	return "NOETL_PLUGIN_KV_H" + hex.EncodeToString(sum[:16])
}

func (b *buckets) bucket(ctx context.Context, tenant string) (jetstream.KeyValue, error) {
	if b.js == nil {
		return nil, errors.New("kv: this worker offers no key-value store")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if kv := b.kv[tenant]; kv != nil {
		return kv, nil
	}
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: BucketName(tenant), Description: "WebAssembly plug-in key-value store of tenant " + tenant,
		History: 1, MaxValueSize: maxKVValue, Replicas: max(b.replicas, 1), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("kv: open the tenant's bucket: %w", err)
	}
	if b.kv == nil {
		b.kv = map[string]jetstream.KeyValue{}
	}
	b.kv[tenant] = kv
	return kv, nil
}

func checkKey(key string) error {
	if !kvKeyRE.MatchString(key) {
		return fmt.Errorf("kv: key %q must be 1 to 256 characters of [-/_=.a-zA-Z0-9]", key)
	}
	return nil
}

func (b *buckets) get(ctx context.Context, tenant, key string) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	kv, err := b.bucket(ctx, tenant)
	if err != nil {
		return nil, false, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("kv: get %q: %w", key, err)
	}
	return e.Value(), true, nil
}

func (b *buckets) put(ctx context.Context, tenant, key string, val []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	kv, err := b.bucket(ctx, tenant)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, val); err != nil {
		return fmt.Errorf("kv: put %q: %w", key, err)
	}
	return nil
}
