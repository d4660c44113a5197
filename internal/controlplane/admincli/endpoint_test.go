package admincli

import "testing"

func TestOnlyALoopbackEndpointGoesUnsigned(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "::1": true, "127.8.9.10": true,
		"abc123.execute-api.eu-west-1.amazonaws.com": false, "10.0.0.1": false, "admin.example.com": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestTheRegionIsReadFromAnAWSHostName(t *testing.T) {
	for host, want := range map[string]string{
		"abc123.execute-api.eu-west-1.amazonaws.com": "eu-west-1",
		"xyz.lambda-url.us-east-2.on.aws":            "us-east-2",
		"admin.example.com":                          "",
	} {
		if got := regionFromHost(host); got != want {
			t.Errorf("regionFromHost(%q) = %q, want %q", host, got, want)
		}
	}
}
