package client

import "time"

// SetResultsLinger sets how long c keeps its results subscription once
// no call waits.
func SetResultsLinger(c *Client, d time.Duration) {
	c.results.mu.Lock()
	defer c.results.mu.Unlock()
	c.results.linger = d
}

// ResultsSubscribed reports whether c has its results subscription.
func ResultsSubscribed(c *Client) bool {
	c.results.mu.Lock()
	defer c.results.mu.Unlock()
	return c.results.sub != nil
}
