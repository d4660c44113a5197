package protocol

import "testing"

func TestUnB64(t *testing.T) {
	good := []struct {
		in   string
		want string
	}{
		{"", ""},
		{"YQ", "a"},
		{"_-8", "\xff\xef"},
	}
	for _, tc := range good {
		got, err := UnB64(tc.in)
		if err != nil || string(got) != tc.want {
			t.Errorf("UnB64(%q) = %q, %v", tc.in, got, err)
		}
		if B64(got) != tc.in {
			t.Errorf("B64 does not give back %q", tc.in)
		}
	}
	for _, bad := range []string{"YQ==", "/+8", "Y Q", "YQ\n", "Y\rQ", "YR", "A"} {
		if _, err := UnB64(bad); err == nil {
			t.Errorf("UnB64(%q) accepted", bad)
		}
	}
	if _, err := UnB64Len("YQ", 2); err == nil {
		t.Error("UnB64Len accepted the wrong length")
	}
}
