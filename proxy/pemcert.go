package proxy

import (
	"crypto/x509"
	"encoding/pem"
)

// nextPEMCert returns the next CERTIFICATE block of data, parsed, and
// what follows it; nil at the end. Blocks of other types are skipped.
func nextPEMCert(data []byte) (*x509.Certificate, []byte, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, nil, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, err
		}
		return c, data, nil
	}
}
