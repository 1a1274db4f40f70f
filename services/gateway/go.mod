module github.com/noetl/noetl/services/gateway

go 1.26.0

require (
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.33.0
	github.com/noetl/noetl/gen v0.0.0
	github.com/noetl/noetl/internal v0.0.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sync v0.25.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20261110000943-09e21b237f2c // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab // indirect
)

replace (
	github.com/noetl/noetl/gen => ../../gen
	github.com/noetl/noetl/internal => ../../internal
)
