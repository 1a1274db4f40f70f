package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"
)

// tlsOptions are the flags of a TLS connection to a remote gateway.
type tlsOptions struct {
	enabled    bool
	caFile     string
	serverName string
}

// flags binds the TLS flags on root (with $NOETL_GATEWAY_TLS, $NOETL_GATEWAY_CA_FILE and
// $NOETL_GATEWAY_SERVER_NAME as defaults).
func (o *tlsOptions) flags(root *cobra.Command) {
	o.enabled = os.Getenv("NOETL_GATEWAY_TLS") == "true" || os.Getenv("NOETL_GATEWAY_TLS") == "1"
	o.caFile = os.Getenv("NOETL_GATEWAY_CA_FILE")
	o.serverName = os.Getenv("NOETL_GATEWAY_SERVER_NAME")
	root.PersistentFlags().BoolVar(&o.enabled, "tls", o.enabled, "connect to the gateway over TLS ($NOETL_GATEWAY_TLS; implied by --ca-file and --server-name)")
	root.PersistentFlags().StringVar(&o.caFile, "ca-file", o.caFile, "PEM file of the CA that signed the gateway's certificate, instead of the system's roots ($NOETL_GATEWAY_CA_FILE)")
	root.PersistentFlags().StringVar(&o.serverName, "server-name", o.serverName, "name to verify the gateway's certificate against, when it differs from the address's host ($NOETL_GATEWAY_SERVER_NAME)")
}

// transport returns the TLS credentials the flags describe, or nil for plaintext. The
// certificate is always verified: there is no option to skip it.
func (o *tlsOptions) transport() (credentials.TransportCredentials, error) {
	if o.caFile != "" || o.serverName != "" {
		o.enabled = true
	}
	if !o.enabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.serverName}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", o.caFile)
		}
		cfg.RootCAs = pool
	}
	return credentials.NewTLS(cfg), nil
}
