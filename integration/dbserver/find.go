package dbserver

import "github.com/fenceproxy/fenceproxy/internal/mysqld"

// ErrNotFound is returned (wrapped) by Find and Start when no server binary
// is installed. Test helpers skip on it unless a server is required.
var ErrNotFound = mysqld.ErrNotFound

// Find returns the path of mariadbd or mysqld (mariadbd preferred).
func Find() (binary string, err error) { return mysqld.Find() }
