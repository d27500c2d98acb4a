package models

// AdvisoryLockKey is advisoryLockKey, for the tests of package models_test.
const AdvisoryLockKey = advisoryLockKey
