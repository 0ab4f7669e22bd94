//! What a caller gets when the limiter file is missing, unreadable or invalid: an explicit choice.
