// Package nilcheck tells a nil interface value from one holding a nil
// pointer, map, slice, channel or function (a "typed nil"). Configuration
// checks use it: a store variable left nil by an unchecked Open error, put
// into an interface field, is not == nil, and would otherwise fail only at
// the first message.
package nilcheck

import "reflect"

// IsNil reports whether v is nil or holds a nil pointer, map, slice,
// channel, function or interface.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
