package relay

// CountParses has r tell count of each parse of a request's body ("body")
// or signature header ("signature"). Set before r serves anything.
func CountParses(r *Relay, count func(what string)) { r.countParse = count }
