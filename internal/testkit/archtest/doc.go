// Package archtest holds the test that pins the module's dependency
// graph: the layers of docs/architecture.md, and the packages that must
// link no database driver and no Prometheus client. It has no code.
package archtest
