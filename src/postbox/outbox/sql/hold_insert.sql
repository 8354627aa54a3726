-- Hold retention with a reason. One hold of each kind at most: a hold that needs a republish is
-- added even beside one an operator may release, never the other way round.
INSERT INTO {schema}.retention_holds (reason, kind)
SELECT %(reason)s, %(kind)s
 WHERE NOT EXISTS (SELECT FROM {schema}.retention_holds WHERE kind = %(kind)s OR kind = 'republish')
