package budget

// SetChargedAt sets the hook [Tracker.ChargeAncestors] calls after each
// ancestor it charged.
func SetChargedAt(t *Tracker, f func(ancestor string)) { t.chargedAt = f }
