package store

// Token buckets: the pairing throttle's state (PairingCodes.TakeToken). In
// the store rather than in a process, because a deployment is many
// replicas and a flood spread across them must drain one bucket, not one
// per Lambda instance.

// Bucket is one token bucket as stored: Tokens left at the instant At
// (epoch ms).
type Bucket struct {
	Tokens int64
	At     int64
}

// Take refills b for the time since b.At, one token per refillMs up to
// burst, and takes one token if there is one. A bucket never seen (At 0)
// starts full. Integer arithmetic, and At advances only by whole refills,
// so a caller asking every few milliseconds cannot round its way to a
// token early; a full bucket's clock restarts at now.
func (b Bucket) Take(now, burst, refillMs int64) (Bucket, bool) {
	if b.At == 0 {
		b = Bucket{Tokens: burst, At: now}
	}
	if now > b.At {
		gained := (now - b.At) / refillMs
		b.Tokens += gained
		b.At += gained * refillMs
	}
	if b.Tokens >= burst {
		b = Bucket{Tokens: burst, At: now}
	}
	if b.Tokens < 1 {
		return b, false
	}
	b.Tokens--
	return b, true
}
