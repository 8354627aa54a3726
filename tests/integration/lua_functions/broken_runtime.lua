-- A bug: indexes nil at run time.
local missing = nil
return missing.field
