insert into plain.jobs (payload) values ('{"n": 1}');
