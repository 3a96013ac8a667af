// Package readmecheck holds the test that compiles every Go block of the
// repository's README.md, so that the README's snippets cannot drift from
// the API and never discard an error. It has no code of its own.
package readmecheck
